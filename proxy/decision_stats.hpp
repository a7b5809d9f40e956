// Decisions counted by tool, decision, class and reason_code for /metrics,
// one per network thread. Every label is bounded (tool names come from the
// config, the rest from fixed catalogs): never a key, run or fingerprint.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace idemgate::proxy {

class DecisionStats {
 public:
  // tool, decision, class, reason_code ("" where there is none).
  using Labels = std::array<std::string, 4>;

  // Called once per decision from the guard's decision log. The lock is
  // only ever contended by a /metrics scrape.
  void count(std::string_view tool, std::string_view decision, std::string_view answer_class,
             std::string_view reason_code) {
    Labels key{std::string(tool), std::string(decision), std::string(answer_class), std::string(reason_code)};
    std::lock_guard lock(mutex_);
    ++counts_[std::move(key)];
  }

  std::map<Labels, std::uint64_t> snapshot() const {
    std::lock_guard lock(mutex_);
    return counts_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<Labels, std::uint64_t> counts_;
};

}  // namespace idemgate::proxy
