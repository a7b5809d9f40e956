// A fixed-bucket latency histogram for /metrics, observed from any thread
// without a lock (the ledger's call latency; the proxy's upstream latency).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace idemgate::ledger {

class LatencyHistogram {
 public:
  // Upper bounds in seconds: 100 us to 30 s covers a local SQLite commit and
  // a provider that answers at the response deadline.
  static constexpr std::array<double, 16> bounds_s{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                   0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    30};

  void observe(std::chrono::nanoseconds elapsed) noexcept {
    double const s = std::chrono::duration<double>(elapsed).count();
    std::size_t i = 0;
    while (i < bounds_s.size() && s > bounds_s[i]) ++i;
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(static_cast<std::uint64_t>(elapsed.count() > 0 ? elapsed.count() : 0),
                      std::memory_order_relaxed);
  }

  // Observations in bucket i alone (i == bounds_s.size(): above the last bound).
  std::uint64_t count_in(std::size_t i) const noexcept { return counts_[i].load(std::memory_order_relaxed); }
  double sum_seconds() const noexcept { return static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9; }

 private:
  std::array<std::atomic<std::uint64_t>, bounds_s.size() + 1> counts_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

}  // namespace idemgate::ledger
