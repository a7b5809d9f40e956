// The bytes guarded calls hold in memory (request bodies and answer
// buffers), counted process-wide across network threads, so that many large
// calls at once get 503 overloaded instead of growing memory without bound.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>

namespace idemgate::proxy {

class BodyBudget {
public:
  // Held by one call; gives its bytes back when destroyed.
  class Reservation {
  public:
    Reservation(BodyBudget& budget, std::uint64_t bytes) noexcept : budget_(&budget), bytes_(bytes) {}
    Reservation(Reservation&& other) noexcept : budget_(other.budget_), bytes_(other.bytes_) { other.budget_ = nullptr; }
    Reservation& operator=(Reservation&& other) noexcept {
      if (this != &other) {
        release();
        budget_ = std::exchange(other.budget_, nullptr);
        bytes_ = other.bytes_;
      }
      return *this;
    }
    ~Reservation() { release(); }

  private:
    void release() noexcept {
      if (budget_) budget_->used_.fetch_sub(bytes_, std::memory_order_relaxed);
      budget_ = nullptr;
    }

    BodyBudget* budget_;
    std::uint64_t bytes_;
  };

  // bytes more, unless that would pass limit.
  std::optional<Reservation> try_reserve(std::uint64_t bytes, std::uint64_t limit) noexcept;
  std::uint64_t in_use() const noexcept { return used_.load(std::memory_order_relaxed); }

private:
  std::atomic<std::uint64_t> used_{0};
};

// The process's budget (memory is the process's, whichever thread holds it).
BodyBudget& guarded_body_budget() noexcept;

}  // namespace idemgate::proxy
