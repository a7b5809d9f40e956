// Recording outcomes until they land (see outcome_recorder.hpp).
#include "proxy/outcome_recorder.hpp"

#include "ledger/ledger.hpp"
#include "proxy/log.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>

#include <atomic>
#include <cassert>
#include <map>
#include <mutex>

namespace idemgate::proxy {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

constexpr auto use_tuple = asio::as_tuple(use_task);
std::atomic<int> pending{0};

// The wait before try `tries` (1, 2...): 100 ms, doubling, at most 2 s.
std::chrono::milliseconds backoff_delay(int tries) { return std::min(50ms * (1 << std::min(tries, 6)), 2000ms); }

Task<void> backoff(int tries) {
  SteadyTimer timer(co_await asio::this_coro::executor, backoff_delay(tries));
  co_await timer.async_wait(use_tuple);
}

// Counts one more background record pending, unless kMaxPendingRecords are
// (false: the caller drops it, logged here).
bool take_pending(const char* what) {
  if (pending.fetch_add(1) >= kMaxPendingRecords) {
    pending.fetch_sub(1);
    log_event("ledger_record_dropped", {{"what", what}, {"pending", kMaxPendingRecords}});
    return false;
  }
  return true;
}

bool past(ledger::TimePoint t) { return ledger::Clock::now() > t; }

// Outcomes handed to the background and not durable yet, process-wide (a
// retry may reach another worker thread), by ledger and intent.
struct PendingTable {
  std::mutex mutex;
  std::map<std::pair<const ledger::Ledger*, std::int64_t>, ledger::Intent> intents;
};

PendingTable& pending_table() {
  static PendingTable table;
  return table;
}

// Removes its entry when the background record ends, however it ends.
class PendingEntry {
 public:
  // `settled` with `response` (when there is one) as its stored answer.
  PendingEntry(const ledger::Ledger& ledger, ledger::Intent&& settled, const std::optional<ledger::StoredResponse>& response)
      : key_{&ledger, settled.id} {
    if (response) settled.response = *response;
    auto& t = pending_table();
    std::lock_guard lock(t.mutex);
    t.intents.insert_or_assign(key_, std::move(settled));
  }
  PendingEntry(PendingEntry&& other) noexcept : key_(other.key_) { other.key_.first = nullptr; }
  PendingEntry(const PendingEntry&) = delete;
  PendingEntry& operator=(const PendingEntry&) = delete;
  PendingEntry& operator=(PendingEntry&&) = delete;
  ~PendingEntry() {
    if (!key_.first) return;
    auto& t = pending_table();
    std::lock_guard lock(t.mutex);
    t.intents.erase(key_);
  }

 private:
  std::pair<const ledger::Ledger*, std::int64_t> key_;
};

// `i` as `o` (redacted: Ledger::redact) leaves it (what
// Store::record_outcome writes), but for o's response: the caller's to add
// where it is needed (a copy of a whole answer).
void settle(ledger::Intent& i, const ledger::Outcome& o) {
  i.state = o.state;
  i.answer_class = o.answer_class;
  i.status = o.status;
  if (!o.receipt.empty()) i.receipt = o.receipt;
  if (o.response) i.response.reset();  // replaced by o's
  i.lease_until.reset();
  i.unknown_since.reset();
  i.waived += o.waive ? 1 : 0;
  i.retry_not_before.reset();
  if (o.retry_after)
    i.retry_not_before = std::chrono::time_point_cast<ledger::Millis>(ledger::Clock::now() + *o.retry_after);
}

// Spawns `op` on `executor` unless too many are pending.
template <class Op>
void spawn_bounded(Executor executor, const char* what, Op op) {
  if (!take_pending(what)) return;
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

// Tries until the record lands, is superseded or `until` passes; tries
// before first_try were made already (on the request path). `entry`, if any,
// is the record's line in the pending table, removed when this ends. A
// Watcher, not a coroutine: every answered write hands one over, and the
// ledger's completion calls it directly. It owns itself from start() on:
// through the ledger's call, then through its backoff timer's wait.
class Recorder final : public ledger::OutcomeWatcher {
 public:
  // Counted pending by `start`, which may drop it instead.
  Recorder(Executor executor, ledger::Ledger& ledger, ledger::Outcome&& outcome, ledger::TimePoint until,
           int first_try, std::optional<PendingEntry>&& entry)
      : executor_(std::move(executor)),
        ledger_(ledger),
        until_(until),
        tries_(first_try),
        entry_(std::move(entry)) {
    this->outcome = std::move(outcome);
  }
  ~Recorder() override {
    if (counted_) pending.fetch_sub(1);
  }

  // Starts `self` unless too many are pending (then it is dropped, logged).
  static void start(std::unique_ptr<Recorder> self) {
    if (!take_pending("record_outcome")) return;
    self->counted_ = true;
    if (self->tries_) {
      wait(std::move(self));
    } else {
      attempt(std::move(self));
    }
  }

  void done(std::unique_ptr<ledger::Watcher<void>> watcher, ledger::Result<void> recorded) override {
    assert(watcher.get() == this);
    std::unique_ptr<Recorder> self(static_cast<Recorder*>(watcher.release()));
    try {
      if (!landed(recorded)) wait(std::move(self));
    } catch (const std::exception& ex) {
      log_event("internal_error", {{"where", "record_outcome"}, {"error", ex.what()}});
    }
  }

 private:
  // Contained like the coroutine's exceptions were: an allocation that
  // fails here gives the record up, logged, instead of leaving through the
  // event loop or into the request path. The ledger reads the outcome where
  // it is (OutcomeWatcher), and leaves it for the next try.
  static void attempt(std::unique_ptr<Recorder> self) {
    try {
      auto& r = *self;
      r.ledger_.record_outcome(r.executor_, std::move(self));
    } catch (const std::exception& ex) {
      log_event("internal_error", {{"where", "record_outcome"}, {"error", ex.what()}});
    }
  }

  static void wait(std::unique_ptr<Recorder> self) {
    auto& r = *self;
    if (!r.timer_) r.timer_.emplace(r.executor_);  // made on the first retry: most records land at once
    r.timer_->expires_after(backoff_delay(r.tries_));
    // Tried again whatever the wait's error (nothing cancels it), as the
    // coroutine's backoff did.
    r.timer_->async_wait([self = std::move(self)](boost::system::error_code) mutable { attempt(std::move(self)); });
  }

  // Whether this record is over (landed, superseded or given up); false:
  // try again after a backoff.
  bool landed(const ledger::Result<void>& recorded) {
    auto const tries = tries_++;
    if (recorded || recorded.error() == ledger::errc::illegal_transition) {
      if (tries) log_event("ledger_record_landed", {{"intent", outcome.intent_id},
                                                    {"attempt", outcome.attempt},
                                                    {"tries", tries + 1},
                                                    {"result", recorded ? "recorded" : "superseded"}});
      return true;
    }
    if (tries == 2)
      log_event("ledger_record_retry", {{"intent", outcome.intent_id},
                                        {"attempt", outcome.attempt},
                                        {"class", outcome.answer_class},
                                        {"pending", pending_records()}});
    if (past(until_)) {
      log_event("ledger_record_lost", {{"intent", outcome.intent_id},
                                       {"attempt", outcome.attempt},
                                       {"tries", tries + 1},
                                       {"error", recorded.error().message()},
                                       {"detail", "the attempt's lease turns it unknown; it is reconciled before any re-send"}});
      return true;
    }
    return false;
  }

  Executor executor_;
  ledger::Ledger& ledger_;
  ledger::TimePoint until_;
  int tries_;
  std::optional<PendingEntry> entry_;  // durable (or given up): no longer pending once this goes
  std::optional<SteadyTimer> timer_;
  bool counted_ = false;
};

}  // namespace

ledger::Intent record_after_answer(Executor executor, ledger::Ledger& ledger, ledger::Outcome outcome,
                                   ledger::TimePoint keep_trying_until, ledger::Intent before) {
  outcome.after_answer = true;
  // Redacted once: the view shown now and the record written later.
  ledger.redact(outcome);
  settle(before, outcome);
  // The caller's view is a copy without the snapshot (a whole request body);
  // the pending entry keeps the intent whole.
  auto snapshot = std::move(before.request_snapshot);
  before.request_snapshot.clear();
  ledger::Intent shown = before;
  before.request_snapshot = std::move(snapshot);
  std::optional<PendingEntry> entry(std::in_place, ledger, std::move(before), outcome.response);
  Recorder::start(std::make_unique<Recorder>(std::move(executor), ledger, std::move(outcome), keep_trying_until, 0,
                                             std::move(entry)));
  return shown;
}

std::optional<ledger::Intent> pending_outcome(const ledger::Ledger& ledger, std::int64_t intent_id, int attempt) {
  auto& t = pending_table();
  std::lock_guard lock(t.mutex);
  auto found = t.intents.find({&ledger, intent_id});
  if (found == t.intents.end() || found->second.attempts != attempt) return std::nullopt;
  return found->second;
}

void show_pending_outcome(const ledger::Ledger& ledger, ledger::Intent& intent) {
  if (intent.state != ledger::IntentState::dispatched) return;
  if (auto pending = pending_outcome(ledger, intent.id, intent.attempts)) intent = std::move(*pending);
}

namespace {

// Polls `pending` (1 ms, doubling to 50 ms) until it is false: true, or
// `within` passed: false. Polled: a record lands within one group commit, and
// a waiter here is a request racing an answer just given, rare enough not to
// need a notification.
template <class Pending>
Task<bool> wait_while(Pending pending, std::chrono::milliseconds within) {
  auto const end = std::chrono::steady_clock::now() + within;
  SteadyTimer timer(co_await asio::this_coro::executor);
  for (auto step = 1ms; pending(); step = std::min(step * 2, 50ms)) {
    if (std::chrono::steady_clock::now() >= end) co_return false;
    timer.expires_after(step);
    co_await timer.async_wait(use_tuple);
  }
  co_return true;
}

}  // namespace

Task<bool> outcome_landed(const ledger::Ledger& ledger, std::int64_t intent_id, int attempt,
                                     std::chrono::milliseconds within) {
  return wait_while([&ledger, intent_id, attempt] { return pending_outcome(ledger, intent_id, attempt).has_value(); },
                    within);
}

namespace {

bool run_outcome_pending(const ledger::Ledger& ledger, const std::string& run, const std::string& tool,
                         const std::string& answer_class) {
  auto& t = pending_table();
  std::lock_guard lock(t.mutex);
  for (const auto& [key, intent] : t.intents)
    if (key.first == &ledger && intent.run == run && intent.tool == tool && intent.answer_class == answer_class)
      return true;
  return false;
}

}  // namespace

Task<bool> run_outcomes_landed(const ledger::Ledger& ledger, const std::string& run,
                                          const std::string& tool, const std::string& answer_class,
                                          std::chrono::milliseconds within) {
  return wait_while([&ledger, run, tool, answer_class] { return run_outcome_pending(ledger, run, tool, answer_class); },
                    within);
}

Task<std::optional<ledger::Intent>> record_outcome(ledger::Ledger& ledger, ledger::Outcome outcome,
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
  // Each on its own line: GCC 12 mishandles temporaries in a full
  // expression with a co_await (see ledger.hpp).
  auto executor = co_await asio::this_coro::executor;
  std::optional<PendingEntry> none;
  auto recorder = std::make_unique<Recorder>(std::move(executor), ledger, std::move(outcome), keep_trying_until, 3,
                                             std::move(none));
  Recorder::start(std::move(recorder));
  co_return std::nullopt;
}

void persist_escalation_later(Executor executor, ledger::Ledger& ledger,
                              ledger::EscalationRequest request) {
  auto task = [](ledger::Ledger& ledger, ledger::EscalationRequest request) -> Task<void> {
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
