// Process-wide accounting of guarded bodies in memory (see body_budget.hpp).
#include "proxy/body_budget.hpp"

namespace idemgate::proxy {

std::optional<BodyBudget::Reservation> BodyBudget::try_reserve(std::uint64_t bytes, std::uint64_t limit) noexcept {
  auto used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit || used > limit - bytes) return std::nullopt;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return Reservation(*this, bytes);
}

BodyBudget& guarded_body_budget() noexcept {
  static BodyBudget budget;
  return budget;
}

}  // namespace idemgate::proxy
