// The ledger's calls (see ledger.hpp): each makes its Job (ledger_jobs.hpp)
// and queues it for the workers (ledger.cpp); the awaiting coroutine resumes
// on its own executor with the Result.
#include "ledger/ledger.hpp"

#include "ledger/ledger_jobs.hpp"
#include "ledger/redact.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/async_result.hpp>

namespace idemgate::ledger {

using namespace jobs;

template <class T, class Op>
Awaitable<T> Ledger::call(Order order, Op op) {
  stats_.calls.fetch_add(1, std::memory_order_relaxed);
  return asio::async_initiate<const boost::asio::use_awaitable_t<Executor>&, void(Result<T>)>(
      [this, order = std::move(order), op = std::move(op)](auto handler) mutable {
        using Handler = decltype(handler);
        enqueue(std::make_unique<CallJob<T, Op, Handler>>(std::move(order), std::move(op),
                                                          std::move(handler), stats_));
      },
      use_task);
}

template <class Value, template <class> class JobT, class Request>
Task<Value> Ledger::submit(Request request) {
  stats_.calls.fetch_add(1, std::memory_order_relaxed);
  return asio::async_initiate<const boost::asio::use_awaitable_t<Executor>&, void(Value)>(
      [this, request = std::move(request)](auto handler) mutable {
        using Handler = decltype(handler);
        enqueue(std::make_unique<JobT<Handler>>(std::move(request), std::move(handler), stats_));
      },
      use_task);
}

Awaitable<Reservation> Ledger::reserve_intent(ReserveRequest request, RequestSnapshot snapshot) {
  request.request_snapshot = redact_request(snapshot, options_.redact);
  return submit<Result<Reservation>, ReserveJob>(std::move(request));
}

Task<Boxed<Admission>> Ledger::admit(AdmitRequest request, RequestSnapshot snapshot) {
  request.reserve.request_snapshot = redact_request(snapshot, options_.redact);
  if (request.first_attempt) request.first_attempt->replica = options_.replica_id;
  auto const number = admissions_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (direct_ && direct_->takes(request) && claim_direct()) {
    auto const start = std::chrono::steady_clock::now();
    std::optional<Result<AdmitFirst>> first;
    try {
      // The thread polls for the answer only if no admission came while the
      // last direct one was on the wire: under load its other connections
      // have work for it (at 64 connections the polls cost a tenth of the
      // throughput). It serves them between polls, so an admission that
      // comes during a poll is seen, and the next one does not poll.
      first = co_await direct_->send(request, alone_.load(std::memory_order_relaxed));
    } catch (...) {
      release_direct();
      throw;
    }
    alone_.store(admissions_.load(std::memory_order_relaxed) == number, std::memory_order_relaxed);
    // Not released when the frame is destroyed without resuming: that is
    // the process stopping, the Ledger gone first (see ~Ledger).
    release_direct();
    if (first) {
      if (!*first) {
        stats_.calls.fetch_add(1, std::memory_order_relaxed);
        stats_.errors.fetch_add(1, std::memory_order_relaxed);
        stats_.latency.observe(std::chrono::steady_clock::now() - start);
        co_return std::make_unique<Result<Admission>>(first->error());
      }
      stats_.direct_admissions.fetch_add(1, std::memory_order_relaxed);
      stats_.reserve_batches.fetch_add(1, std::memory_order_relaxed);
      stats_.reservations.fetch_add(1, std::memory_order_relaxed);
      if (auto whole = whole_admission(**first)) {
        stats_.calls.fetch_add(1, std::memory_order_relaxed);
        stats_.batches.fetch_add(1, std::memory_order_relaxed);
        stats_.batched_jobs.fetch_add(1, std::memory_order_relaxed);
        stats_.latency.observe(std::chrono::steady_clock::now() - start);
        co_return std::make_unique<Result<Admission>>(std::move(*whole));
      }
      // The charge was refused or a live intent holds the fingerprint: the
      // rest (a read, or the batch's reservation) on a worker, counted as
      // this admission's call. The charge may be committed already: a
      // refusal of the rest is not "nothing written" (busy, queue_full,
      // shutting_down, old_server) but unavailable, as when a worker's
      // second transaction fails.
      Order order{Order::reservations, {}, 0};
      auto op = [request, done = std::move(**first)](Store& s) { return s.finish_admission(request, done); };
      auto rest = co_await call<Admission>(std::move(order), std::move(op));
      if (!rest && (rest.error() == errc::busy || rest.error() == errc::queue_full ||
                    rest.error() == errc::shutting_down || rest.error() == errc::old_server))
        co_return std::make_unique<Result<Admission>>(errc::unavailable);
      co_return std::make_unique<Result<Admission>>(std::move(rest));
    }
    // Nothing was written: the workers do it.
  }
  co_return co_await submit<Boxed<Admission>, AdmitJob>(std::move(request));
}

Awaitable<AttemptStart> Ledger::begin_attempt(AttemptRequest request) {
  return call<AttemptStart>(intent_order(request.intent_id),
                            [request, replica = options_.replica_id](Store& s) {
                              return s.begin_attempt(request, replica);
                            });
}

void Ledger::redact(Outcome& outcome) const {
  // Marked only with a response to redact: one attached after this call is
  // still redacted when it is recorded.
  if (!outcome.response || outcome.redacted_by == this) return;
  outcome.response = redact_response(std::move(*outcome.response), options_.redact, options_.response_cap);
  outcome.redacted_by = this;
}

Awaitable<Intent> Ledger::record_outcome(Outcome outcome) {
  redact(outcome);
  return submit<Result<Intent>, OutcomeJob>(std::move(outcome));
}

namespace {

// A Watcher as a completion handler: its executor is the one it was given.
template <class T>
class WatcherHandler {
 public:
  using executor_type = Executor;
  WatcherHandler(executor_type executor, std::unique_ptr<Watcher<T>> watcher)
      : executor_(std::move(executor)), watcher_(std::move(watcher)) {}
  executor_type get_executor() const noexcept { return executor_; }
  void operator()(Result<T> result) {
    auto& watcher = *watcher_;
    watcher.done(std::move(watcher_), std::move(result));
  }

 private:
  executor_type executor_;
  std::unique_ptr<Watcher<T>> watcher_;
};

}  // namespace

void Ledger::record_outcome(Executor executor, std::unique_ptr<OutcomeWatcher> watcher) {
  stats_.calls.fetch_add(1, std::memory_order_relaxed);
  auto& outcome = watcher->outcome;  // where it is: the job owns the watcher
  redact(outcome);
  using Handler = WatcherHandler<void>;
  enqueue(std::make_unique<WatchedOutcomeJob<Handler>>(outcome, Handler(std::move(executor), std::move(watcher)),
                                                       stats_));
}

Awaitable<Intent> Ledger::mark_unknown(std::int64_t intent_id, int attempt) {
  Outcome outcome;
  outcome.intent_id = intent_id;
  outcome.attempt = attempt;
  outcome.state = IntentState::unknown;
  outcome.answer_class = "unknown";
  return record_outcome(std::move(outcome));
}

Awaitable<Intent> Ledger::find_intent(std::int64_t intent_id) {
  return call<Intent>(unlocked, [intent_id](Store& s) { return s.find_intent(intent_id); });
}

Awaitable<Intent> Ledger::find_intent_by_key(std::string key) {
  return call<Intent>(unlocked,
                      [key = std::move(key)](Store& s) { return s.find_intent_by_key(key); });
}

Awaitable<std::vector<Intent>> Ledger::list_intents_by_run(std::string run, int limit) {
  return call<std::vector<Intent>>(unlocked, [run = std::move(run), limit](Store& s) {
    return s.list_intents_by_run(run, limit);
  });
}

Awaitable<std::int64_t> Ledger::count_intents(std::string run, std::string tool,
                                              std::string answer_class,
                                              std::int64_t except_intent) {
  return call<std::int64_t>(unlocked, [run = std::move(run), tool = std::move(tool),
                                       answer_class = std::move(answer_class),
                                       except_intent](Store& s) {
    return s.count_intents(run, tool, answer_class, except_intent);
  });
}

Awaitable<std::vector<Intent>> Ledger::list_unknown_past_ttl(int limit) {
  return call<std::vector<Intent>>(unlocked,
                                   [limit](Store& s) { return s.list_unknown_past_ttl(limit); });
}

Awaitable<std::vector<Intent>> Ledger::list_unescalated_unknowns(int limit) {
  return call<std::vector<Intent>>(unlocked,
                                   [limit](Store& s) { return s.list_unescalated_unknowns(limit); });
}

Awaitable<std::vector<Intent>> Ledger::claim_lookups(std::vector<LookupDue> due, int limit) {
  return call<std::vector<Intent>>(alone, [due = std::move(due), limit](Store& s) {
    return s.claim_lookups(due, limit);
  });
}

Awaitable<RunCharge> Ledger::count_call(std::string run, std::int64_t budget, CallKind kind) {
  return submit<Result<RunCharge>, ChargeJob>(ChargeRequest{std::move(run), budget, kind});
}

Awaitable<Run> Ledger::find_run(std::string run) {
  return call<Run>(unlocked, [run = std::move(run)](Store& s) { return s.find_run(run); });
}

Awaitable<Run> Ledger::freeze_run(std::string run, std::string reason) {
  return call<Run>(alone, [run = std::move(run), reason = std::move(reason)](Store& s) {
    return s.set_run_state(run, RunState::frozen, reason);
  });
}

Awaitable<Run> Ledger::unfreeze_run(std::string run) {
  return call<Run>(alone, [run = std::move(run)](Store& s) {
    return s.set_run_state(run, RunState::active, "");
  });
}

Awaitable<Run> Ledger::kill_run(std::string run, std::string reason) {
  return call<Run>(alone, [run = std::move(run), reason = std::move(reason)](Store& s) {
    return s.set_run_state(run, RunState::killed, reason);
  });
}

Awaitable<std::int64_t> Ledger::persist_escalation(EscalationRequest request) {
  // Named locals only: GCC 12 destroys temporaries of a co_await expression twice.
  Order order = unlocked;
  auto op = [request](Store& s) { return s.persist_escalation(request); };
  auto id = co_await call<std::int64_t>(std::move(order), std::move(op));
  if (id && escalation_observer_) escalation_observer_(*id, request);
  co_return id;
}

Awaitable<Escalation> Ledger::find_escalation(std::int64_t id) {
  return call<Escalation>(unlocked, [id](Store& s) { return s.find_escalation(id); });
}

Awaitable<std::vector<Escalation>> Ledger::list_escalations(std::optional<EscalationState> state,
                                                            int limit) {
  return call<std::vector<Escalation>>(
      unlocked, [state, limit](Store& s) { return s.list_escalations(state, limit); });
}

Awaitable<Escalation> Ledger::resolve_escalation(ResolveRequest request) {
  return call<Escalation>(
      alone, [request = std::move(request)](Store& s) { return s.resolve_escalation(request); });
}

Awaitable<void> Ledger::record_refusal(std::int64_t intent_id, std::string reason_code) {
  return call<void>(unlocked, [intent_id, reason_code = std::move(reason_code)](Store& s) {
    return s.record_refusal(intent_id, reason_code);
  });
}

Awaitable<Signals> Ledger::read_signals(TimePoint since) {
  return call<Signals>(unlocked, [since](Store& s) { return s.read_signals(since); });
}

Awaitable<int> Ledger::recover_expired() {
  return call<int>(alone, [](Store& s) { return s.recover_expired(); });
}

}  // namespace idemgate::ledger
