// Budgeted growth of a guarded answer's buffer (see answer_buffer.hpp).
#include "proxy/answer_buffer.hpp"

#include <algorithm>

namespace idemgate::proxy {

bool AnswerBuffer::make_room(std::uint64_t cap, std::optional<std::uint64_t> wanted) {
  auto const used = static_cast<std::uint64_t>(body_.size());
  if (used < capacity_) return true;
  if (capacity_ == 0 && wanted && *wanted > 0 && grow_to(std::min(*wanted, cap))) return true;
  // A call's first answer bytes go into what intake already set aside.
  if (capacity_ == 0 && budget_ && budget_->bytes() > 0 && grow_to(std::min({cap, budget_->bytes(), step})))
    return true;
  return grow_to(used + std::min(cap - used, std::max(step, used))) || grow_to(used + std::min(cap - used, step));
}

bool AnswerBuffer::grow_to(std::uint64_t capacity) {
  if (budget_ && !budget_->cover(capacity)) return false;
  // A fresh string gets exactly this capacity (reserve() would round a
  // smaller step up to twice the old capacity, past what the budget holds).
  std::string grown;
  grown.reserve(static_cast<std::size_t>(capacity));
  grown.append(body_);
  body_.swap(grown);
  capacity_ = capacity;
  return true;
}

}  // namespace idemgate::proxy
