// The bytes guarded calls hold in memory (request bodies and answer
// buffers), counted process-wide across network threads, so that many large
// calls at once get 503 overloaded, or have their answers streamed past a
// shorter buffer, instead of growing memory without bound.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>

namespace idemgate::proxy {

class BodyBudget {
public:
  // Held by one call; gives its bytes back when destroyed. It can grow as
  // the call comes to hold more (an answer buffer filling up), never past
  // the limit it was made under.
  class Reservation {
  public:
    Reservation(BodyBudget& budget, std::uint64_t bytes, std::uint64_t limit) noexcept
        : budget_(&budget), bytes_(bytes), limit_(limit) {}
    Reservation(Reservation&& other) noexcept
        : budget_(std::exchange(other.budget_, nullptr)), bytes_(other.bytes_), limit_(other.limit_) {}
    Reservation& operator=(Reservation&& other) noexcept {
      if (this != &other) {
        release();
        budget_ = std::exchange(other.budget_, nullptr);
        bytes_ = other.bytes_;
        limit_ = other.limit_;
      }
      return *this;
    }
    ~Reservation() { release(); }

    std::uint64_t bytes() const noexcept { return budget_ ? bytes_ : 0; }

    // Holds at least `total` bytes, taking the difference from the budget;
    // false (and nothing taken) when that would pass the limit.
    bool cover(std::uint64_t total) noexcept {
      if (!budget_) return false;
      if (total <= bytes_) return true;
      if (!budget_->take(total - bytes_, limit_)) return false;
      bytes_ = total;
      return true;
    }

  private:
    void release() noexcept {
      if (budget_) budget_->used_.fetch_sub(bytes_, std::memory_order_relaxed);
      budget_ = nullptr;
    }

    BodyBudget* budget_;
    std::uint64_t bytes_;
    std::uint64_t limit_;
  };

  // bytes more, unless that would pass limit.
  std::optional<Reservation> try_reserve(std::uint64_t bytes, std::uint64_t limit) noexcept;
  std::uint64_t in_use() const noexcept { return used_.load(std::memory_order_relaxed); }

private:
  bool take(std::uint64_t bytes, std::uint64_t limit) noexcept;

  std::atomic<std::uint64_t> used_{0};
};

// The process's budget (memory is the process's, whichever thread holds it).
BodyBudget& guarded_body_budget() noexcept;

}  // namespace idemgate::proxy
