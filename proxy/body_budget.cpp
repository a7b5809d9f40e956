// Process-wide accounting of guarded bodies in memory (see body_budget.hpp).
#include "proxy/body_budget.hpp"

namespace idemgate::proxy {

bool BodyBudget::take(std::uint64_t bytes, std::uint64_t limit) noexcept {
  auto used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit || used > limit - bytes) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

std::optional<BodyBudget::Reservation> BodyBudget::try_reserve(std::uint64_t bytes, std::uint64_t limit) noexcept {
  if (!take(bytes, limit)) return std::nullopt;
  return Reservation(*this, bytes, limit);
}

BodyBudget& guarded_body_budget() noexcept {
  static BodyBudget budget;
  return budget;
}

}  // namespace idemgate::proxy
