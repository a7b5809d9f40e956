// The process-wide budget of guarded bodies: a reservation that grows never
// takes the budget past its limit (also with threads racing for the last
// bytes), gives back all it grew to, and an answer buffer allocates exactly
// what its reservation holds, growing it only as the answer needs.
#include "proxy/answer_buffer.hpp"
#include "proxy/body_budget.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

using namespace idemgate::proxy;

TEST_CASE("budget: a reservation grows to what it covers and not past the limit") {
  BodyBudget budget;
  auto r = budget.try_reserve(100, 1000);
  REQUIRE(r);
  CHECK(r->bytes() == 100);
  CHECK(r->cover(50));  // already held: nothing taken
  CHECK(budget.in_use() == 100);
  CHECK(r->cover(600));
  CHECK(r->bytes() == 600);
  CHECK(budget.in_use() == 600);
  CHECK_FALSE(r->cover(1001));
  CHECK(r->bytes() == 600);
  CHECK(budget.in_use() == 600);
  CHECK(r->cover(1000));  // exactly the limit fits
  CHECK(budget.in_use() == 1000);
  CHECK_FALSE(budget.try_reserve(1, 1000));
}

TEST_CASE("budget: growth competes with other reservations for the same limit") {
  BodyBudget budget;
  auto a = budget.try_reserve(400, 1000);
  auto b = budget.try_reserve(400, 1000);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->cover(600));
  CHECK_FALSE(b->cover(401));  // a took the last 200
  CHECK(b->bytes() == 400);
  a.reset();
  CHECK(budget.in_use() == 400);  // a gave back all it grew to
  CHECK(b->cover(1000));
}

TEST_CASE("budget: a moved reservation is given back once, grown size included") {
  BodyBudget budget;
  {
    auto r = budget.try_reserve(10, 100);
    REQUIRE(r);
    BodyBudget::Reservation moved = std::move(*r);
    CHECK(moved.cover(70));
    CHECK_FALSE(r->cover(80));  // the moved-from one holds nothing
    CHECK(r->bytes() == 0);
    auto other = budget.try_reserve(5, 100);
    REQUIRE(other);
    moved = std::move(*other);  // gives back its 70, takes other's 5
    CHECK(budget.in_use() == 5);
  }
  CHECK(budget.in_use() == 0);
}

TEST_CASE("budget: threads growing reservations at once never pass the limit") {
  BodyBudget budget;
  // Less than one thread's last step: every round meets the limit, and two
  // threads' middle steps together pass it.
  constexpr std::uint64_t limit = 24 * 1024;
  std::atomic<bool> passed{false};
  std::atomic<std::uint64_t> refusals{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto r = budget.try_reserve(512, limit);
        if (!r) {
          refusals.fetch_add(1);
          continue;
        }
        for (std::uint64_t want = 1024; want <= 32 * 1024; want *= 2) {
          if (!r->cover(want)) {
            refusals.fetch_add(1);
            break;
          }
          if (budget.in_use() > limit) passed = true;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK_FALSE(passed.load());
  CHECK(refusals.load() >= 4 * 2000);
  CHECK(budget.in_use() == 0);
}

TEST_CASE("answer buffer: a short answer fits in the slice intake set aside, the budget untouched") {
  BodyBudget budget;
  auto r = budget.try_reserve(16 * 1024, 1024 * 1024);
  REQUIRE(r);
  std::string body;
  AnswerBuffer buffer(body, &*r);
  REQUIRE(buffer.make_room(1024 * 1024 + 1, std::nullopt));  // chunked: length unknown
  CHECK(buffer.capacity() == 16 * 1024);
  CHECK(body.capacity() >= 16 * 1024);
  CHECK(r->bytes() == 16 * 1024);
  body.resize(200);
  CHECK(buffer.make_room(1024 * 1024 + 1, std::nullopt));
  CHECK(r->bytes() == 16 * 1024);
}

TEST_CASE("answer buffer: a known length is reserved whole, at most guarded_answer + 1") {
  BodyBudget budget;
  auto r = budget.try_reserve(16 * 1024, 8 * 1024 * 1024);
  REQUIRE(r);
  std::string body;
  AnswerBuffer buffer(body, &*r);
  REQUIRE(buffer.make_room(1024 * 1024 + 1, 300 * 1024));
  CHECK(buffer.capacity() == 300 * 1024);
  CHECK(r->bytes() == 300 * 1024);

  std::string big;
  auto r2 = budget.try_reserve(16 * 1024, 8 * 1024 * 1024);
  REQUIRE(r2);
  AnswerBuffer capped(big, &*r2);
  REQUIRE(capped.make_room(1024 * 1024 + 1, 8 * 1024 * 1024));
  CHECK(capped.capacity() == 1024 * 1024 + 1);
  CHECK(r2->bytes() == 1024 * 1024 + 1);
}

TEST_CASE("answer buffer: under pressure it grows in steps while the budget lasts, then says no") {
  BodyBudget budget;
  constexpr std::uint64_t limit = 200 * 1024;
  auto r = budget.try_reserve(16 * 1024, limit);
  REQUIRE(r);
  std::string body;
  AnswerBuffer buffer(body, &*r);
  std::uint64_t const cap = 1024 * 1024 + 1;
  // The whole length does not fit: the slice is used first.
  REQUIRE(buffer.make_room(cap, 4 * 1024 * 1024));
  CHECK(buffer.capacity() == 16 * 1024);
  std::uint64_t rounds = 0;
  while (buffer.make_room(cap, 4 * 1024 * 1024)) {
    body.resize(body.size() + buffer.room());  // as a read that fills the buffer
    CHECK(body.capacity() <= r->bytes() + 15);  // the allocation is what the budget holds (+ the terminator's slack)
    CHECK(budget.in_use() <= limit);
    REQUIRE(++rounds < 100);
  }
  CHECK(body.size() == buffer.capacity());
  CHECK(r->bytes() == buffer.capacity());
  CHECK(limit - budget.in_use() < AnswerBuffer::step);  // stopped only when not one more step fitted
  CHECK(body.size() < cap);
}

TEST_CASE("answer buffer: without a budget it grows to guarded_answer + 1 and stops there") {
  std::string body;
  AnswerBuffer buffer(body, nullptr);
  std::uint64_t const cap = 300 * 1024 + 1;
  while (body.size() < cap) {
    REQUIRE(buffer.make_room(cap, std::nullopt));
    body.resize(body.size() + std::min(buffer.room(), AnswerBuffer::step));
  }
  CHECK(buffer.capacity() == cap);
}
