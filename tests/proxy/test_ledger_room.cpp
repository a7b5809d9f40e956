// with_ledger_room (proxy/ledger_room.hpp): only a call that never ran (the
// ledger's queue was full) is made again, and not past kLedgerRoomWait.
#include "proxy/ledger_room.hpp"

#include "ledger/ledger.hpp"
#include "ledger/executor.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <optional>
#include <vector>

using idemgate::Task;

namespace asio = boost::asio;
using idemgate::ledger::errc;
using idemgate::ledger::Result;
using idemgate::proxy::kLedgerRoomWait;
using idemgate::proxy::with_ledger_room;

namespace {

// Runs with_ledger_room over a call that answers `answers` in turn (the
// last one from then on); gives the result and how many calls were made.
struct Tried {
  Result<int> result{errc::storage_failure};
  int calls = 0;
  std::chrono::steady_clock::duration took{};
};

Tried try_with(std::vector<Result<int>> answers) {
  asio::io_context ioc;
  Tried t;
  auto const start = std::chrono::steady_clock::now();
  asio::co_spawn(
      ioc,
      [&]() -> Task<void> {
        t.result = co_await with_ledger_room([&]() -> idemgate::ledger::Awaitable<int> {
          auto const i = static_cast<std::size_t>(t.calls++);
          co_return answers[std::min(i, answers.size() - 1)];
        });
      },
      asio::detached);
  ioc.run();
  t.took = std::chrono::steady_clock::now() - start;
  return t;
}

}  // namespace

TEST_CASE("with_ledger_room: a full queue is tried again until the call gets in") {
  auto t = try_with({errc::queue_full, errc::queue_full, 7});
  REQUIRE(t.result.has_value());
  CHECK(*t.result == 7);
  CHECK(t.calls == 3);
}

TEST_CASE("with_ledger_room: any other answer, busy included, is the caller's at once") {
  for (auto e : {errc::busy, errc::unavailable, errc::conflict, errc::shutting_down}) {
    auto t = try_with({e});
    CHECK(t.result.error() == e);
    CHECK(t.calls == 1);
  }
  auto ok = try_with({5});
  CHECK(*ok.result == 5);
  CHECK(ok.calls == 1);
}

TEST_CASE("with_ledger_room: a queue that stays full is given up after the wait") {
  auto t = try_with({errc::queue_full});
  CHECK(t.result.error() == errc::queue_full);
  // 1, 2, 4 ... 50 ms apart within the wait: about 25 tries, never more.
  CHECK(t.calls > 5);
  CHECK(t.calls <= 6 + static_cast<int>(kLedgerRoomWait / std::chrono::milliseconds(50)));
  CHECK(t.took >= kLedgerRoomWait - std::chrono::milliseconds(100));
}
