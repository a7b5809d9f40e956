// Reads are retried freely but still bounded: the same failing read (run,
// tool, fingerprint) past the bound is refused, and a Retry-After it got is
// honoured on the next try. Reads have no external effect, so this memory is
// the process's own (shared by its threads), not the ledger's.
#pragma once

#include "policy/decide.hpp"

#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace idemgate::proxy {

class ReadTracker {
public:
  // The ledger-like view decide() takes for this read.
  policy::IntentView view(const std::string& key) const;
  // Records the class of an answer: ok forgets the read, anything else counts.
  void record(const std::string& key, policy::AnswerClass answer_class,
              std::optional<policy::Clock::time_point> retry_not_before);

  // Validation failures per (run, tool), a hint that saves the ledger query
  // on every new write: only runs that failed validation are looked up.
  void note_validation(const std::string& run, const std::string& tool);
  bool validation_seen(const std::string& run, const std::string& tool) const;

private:
  struct Entry {
    int failures = 0;
    policy::AnswerClass last_class = policy::AnswerClass::ok;
    std::optional<policy::Clock::time_point> retry_not_before;
  };
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  std::unordered_set<std::string> validation_;
};

}  // namespace idemgate::proxy
