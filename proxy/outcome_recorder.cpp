// Recording outcomes until they land (see outcome_recorder.hpp).
#include "proxy/outcome_recorder.hpp"

#include "ledger/ledger.hpp"
#include "proxy/log.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>

namespace idemgate::proxy {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
std::atomic<int> pending{0};

asio::awaitable<void> backoff(int tries) {
  asio::steady_timer timer(co_await asio::this_coro::executor, std::min(50ms * (1 << std::min(tries, 6)), 2000ms));
  co_await timer.async_wait(use_tuple);
}

bool past(ledger::TimePoint t) { return ledger::Clock::now() > t; }

// Spawns `op` on `executor` unless too many are pending.
template <class Op>
void spawn_bounded(asio::any_io_executor executor, const char* what, Op op) {
  if (pending.fetch_add(1) >= kMaxPendingRecords) {
    pending.fetch_sub(1);
    log_event("ledger_record_dropped", {{"what", what}, {"pending", kMaxPendingRecords}});
    return;
  }
  asio::co_spawn(executor, std::move(op), [what](std::exception_ptr e) {
    pending.fetch_sub(1);
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      log_event("internal_error", {{"where", what}, {"error", ex.what()}});
    }
  });
}

asio::awaitable<void> keep_recording(ledger::Ledger& ledger, ledger::Outcome outcome, ledger::TimePoint until) {
  for (int tries = 0;; ++tries) {
    co_await backoff(tries + 3);
    ledger::Outcome copy = outcome;
    auto recorded = co_await ledger.record_outcome(std::move(copy));
    if (recorded || recorded.error() == ledger::errc::illegal_transition) {
      log_event("ledger_record_landed", {{"intent", outcome.intent_id},
                                         {"attempt", outcome.attempt},
                                         {"tries", tries + 1},
                                         {"result", recorded ? "recorded" : "superseded"}});
      co_return;
    }
    if (past(until)) {
      log_event("ledger_record_lost", {{"intent", outcome.intent_id},
                                       {"attempt", outcome.attempt},
                                       {"tries", tries + 1},
                                       {"error", recorded.error().message()},
                                       {"detail", "the attempt's lease turns it unknown; it is reconciled before any re-send"}});
      co_return;
    }
  }
}

}  // namespace

asio::awaitable<std::optional<ledger::Intent>> record_outcome(ledger::Ledger& ledger, ledger::Outcome outcome,
                                                              ledger::TimePoint keep_trying_until) {
  for (int tries = 0; tries < 3; ++tries) {
    if (tries) co_await backoff(tries);
    ledger::Outcome copy = outcome;
    auto recorded = co_await ledger.record_outcome(std::move(copy));
    if (recorded) co_return *recorded;
    if (recorded.error() == ledger::errc::illegal_transition) co_return std::nullopt;
  }
  log_event("ledger_record_retry", {{"intent", outcome.intent_id},
                                    {"attempt", outcome.attempt},
                                    {"class", outcome.answer_class},
                                    {"pending", pending_records() + 1}});
  auto executor = co_await asio::this_coro::executor;
  spawn_bounded(executor, "record_outcome", keep_recording(ledger, std::move(outcome), keep_trying_until));
  co_return std::nullopt;
}

void persist_escalation_later(asio::any_io_executor executor, ledger::Ledger& ledger,
                              ledger::EscalationRequest request) {
  auto task = [](ledger::Ledger& ledger, ledger::EscalationRequest request) -> asio::awaitable<void> {
    auto const until = ledger::Clock::now() + 5min;
    for (int tries = 0;; ++tries) {
      co_await backoff(tries + 3);
      ledger::EscalationRequest copy = request;
      auto id = co_await ledger.persist_escalation(std::move(copy));
      if (id || past(std::chrono::time_point_cast<ledger::Millis>(until))) {
        log_event(id ? "escalation_persisted_late" : "escalation_lost",
                  {{"run", request.run}, {"reason_code", request.reason_code}, {"tries", tries + 1}});
        co_return;
      }
    }
  };
  spawn_bounded(std::move(executor), "persist_escalation", task(ledger, std::move(request)));
}

int pending_records() noexcept { return pending.load(std::memory_order_relaxed); }

}  // namespace idemgate::proxy
