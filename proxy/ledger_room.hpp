// Request-path ledger calls under a moment's backlog.
#pragma once

#include "ledger/errc.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

namespace idemgate::proxy {

// How long a request waits for room in the ledger's queue before it is
// refused (503 ledger_unavailable).
inline constexpr std::chrono::milliseconds kLedgerRoomWait{1000};

// The Result a ledger call answered, in its box or not.
template <class T>
const ledger::Result<T>& ledger_result(const ledger::Result<T>& result) {
  return result;
}
template <class T>
const ledger::Result<T>& ledger_result(const std::unique_ptr<ledger::Result<T>>& result) {
  return *result;
}

// Makes the ledger call `call()` and, while it is refused with
// errc::queue_full (the queue was full: the call never ran), makes it again
// after a short wait (1 ms, doubling to 50 ms) for up to kLedgerRoomWait
// from the first try. A moment's backlog (a checkpoint, a burst of outcomes
// ahead in the queue) then costs the agent latency, not a refusal; a ledger
// that stays behind is still refused. Nothing else is tried again: busy may
// follow a committed part of the same call (a lone admission's second
// transaction, a step of a mixed batch). `call` builds each call afresh:
// the last one consumed its arguments.
template <class MakeCall>
auto with_ledger_room(MakeCall call) -> decltype(call()) {
  using namespace std::chrono_literals;
  auto const end = std::chrono::steady_clock::now() + kLedgerRoomWait;
  std::optional<SteadyTimer> timer;
  for (auto step = 1ms;; step = std::min(step * 2, 50ms)) {
    auto result = co_await call();
    if (const auto& r = ledger_result(result);
        r || r.error() != ledger::errc::queue_full || std::chrono::steady_clock::now() + step > end)
      co_return result;
    if (!timer) timer.emplace(co_await boost::asio::this_coro::executor);
    timer->expires_after(step);
    co_await timer->async_wait(boost::asio::as_tuple(use_task));
  }
}

}  // namespace idemgate::proxy
