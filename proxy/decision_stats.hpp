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
    Views const labels{tool, decision, answer_class, reason_code};
    std::lock_guard lock(mutex_);
    // Found by views: the labels are copied into strings once, when first seen.
    if (auto found = counts_.find(labels); found != counts_.end()) {
      ++found->second;
      return;
    }
    counts_.emplace(Labels{std::string(tool), std::string(decision), std::string(answer_class),
                           std::string(reason_code)},
                    1);
  }

  std::map<Labels, std::uint64_t> snapshot() const {
    std::lock_guard lock(mutex_);
    return {counts_.begin(), counts_.end()};
  }

 private:
  using Views = std::array<std::string_view, 4>;
  // Orders Labels and Views alike (as their strings, member by member).
  struct Less {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const noexcept {
      for (std::size_t i = 0; i < 4; ++i)
        if (auto const c = std::string_view(a[i]).compare(std::string_view(b[i])); c != 0) return c < 0;
      return false;
    }
  };
  mutable std::mutex mutex_;
  std::map<Labels, std::uint64_t, Less> counts_;
};

}  // namespace idemgate::proxy
