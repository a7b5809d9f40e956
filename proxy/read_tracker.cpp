// Bounded retries of failing reads (see read_tracker.hpp).
#include "proxy/read_tracker.hpp"

namespace idemgate::proxy {

policy::IntentView ReadTracker::view(const std::string& key) const {
  policy::IntentView v;
  std::lock_guard lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return v;
  v.state = policy::IntentState::retryable;
  v.attempts = it->second.failures;
  v.last_class = it->second.last_class;
  v.retry_not_before = it->second.retry_not_before;
  return v;
}

void ReadTracker::record(const std::string& key, policy::AnswerClass answer_class,
                         std::optional<policy::Clock::time_point> retry_not_before) {
  std::lock_guard lock(mutex_);
  if (answer_class == policy::AnswerClass::ok) {
    entries_.erase(key);
    return;
  }
  auto& e = entries_[key];
  // A new class starts a new count: a 401 after 429s is a different failure.
  if (e.failures > 0 && e.last_class != answer_class) e.failures = 0;
  ++e.failures;
  e.last_class = answer_class;
  e.retry_not_before = retry_not_before;
  // Bounded memory: the table only holds reads that keep failing.
  if (entries_.size() > 100000) entries_.clear();
}

void ReadTracker::note_validation(const std::string& run, const std::string& tool) {
  std::lock_guard lock(mutex_);
  if (validation_.size() > 100000) validation_.clear();
  validation_.insert(run + "\n" + tool);
}

bool ReadTracker::validation_seen(const std::string& run, const std::string& tool) const {
  std::lock_guard lock(mutex_);
  return validation_.count(run + "\n" + tool) > 0;
}

}  // namespace idemgate::proxy
