// The ledger as the proxy uses it: awaitable operations that never block the
// caller's thread. Each call is queued (bounded: a full queue answers
// errc::queue_full at once) to worker threads that own one Store each (PostgreSQL:
// a pool, one connection per worker; SQLite: one thread), and the result is
// posted back to the awaiting coroutine's executor.
//
// Group commit: a worker takes every call waiting in the queue (up to
// max_batch, any kind; with two lanes up to admission_batch once the batch
// holds the admissions' lane's calls) and runs them in one transaction with
// one durable commit, each in its own savepoint, so one call's error
// (illegal_transition, not_found) rolls back that call only. Results are posted after the commit;
// a batch whose transaction fails (connection lost, commit failed) fails
// every call in it with that error (unavailable: nothing is known written).
// A caller awaits each call before the next, so batching never reorders one
// caller's calls.
//
// One writer: calls that lock rows (reservations, intents, run charges) are
// taken by one worker at a time. While its commit is in flight the others
// serve only the calls that lock nothing, and every locking call arriving
// meanwhile waits for the writer's next batch (or the one after, past a
// batch's room, which the writer takes as soon as it is free): the batch
// grows with the load (tens of calls at 64 connections) instead of being
// split across workers that would only queue behind each other on the
// run's row lock.
// Within a batch the reservations are one multi-row statement, the run
// charges one Store::count_calls (by run id) and the first attempts one
// Store::begin_attempts.
//
// With two lanes, an outcome recorded after its answer
// (Outcome::after_answer) waits up to outcome_gather for others: no batch
// starts with it before then, but any batch of its lane taken meanwhile
// takes it along. At low load several outcomes then share one statement,
// one commit and one worker's wake-up, instead of one each; the answers are
// out already, and until it is durable a retry in this process sees the
// outcome (proxy/outcome_recorder). With one lane it does not wait: it would
// only join the next admission's batch, and lengthen that request's path.
//
// Lock order, so that concurrent batches (another replica's) do not
// deadlock: reservations, intents by id, the calls that lock nothing, runs
// by id, and last the first attempts of intents this batch itself reserved
// (rows no other transaction can hold). Runs come late because one run's
// row is hot (every call of the run counts on it): it is held only from the
// end of a batch to its commit. Run state changes lock in an order of their
// own and run alone.
//
// Every call completes with a Result; errors to expect on the request path:
// queue_full, busy, unavailable and old_server (answer 503
// ledger_unavailable, dispatch nothing; the proxy waits a moment for room
// first on queue_full),
// illegal_transition, not_found, shutting_down. The Ledger must outlive the
// calls awaiting it.
//
// GCC 12 miscompiles braced temporaries inside a co_await expression
// (`co_await ledger.reserve_intent(request, {})` frees garbage): bind such
// arguments to a named local first.
#pragma once

#include "config/config.hpp"
#include "ledger/direct_admit.hpp"
#include "ledger/errc.hpp"
#include "ledger/latency_histogram.hpp"
#include "ledger/redact.hpp"
#include "ledger/store.hpp"
#include "ledger/types.hpp"
#include "ledger/executor.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace idemgate::ledger {

template <class T>
using Awaitable = Task<Result<T>>;

// A Result on the heap: what passes through the awaitables between the
// ledger and its caller is a pointer, not the Intent a Result may hold
// (dozens of members, moved at each co_await and co_return it crosses).
template <class T>
using Boxed = std::unique_ptr<Result<T>>;

// Told how a call its caller does not wait for ended (Ledger::record_outcome
// with a watcher): once, on the executor given with it, and given back its
// own ownership (`self` is this watcher). Destroyed untold if that
// executor's context goes first, or if the result cannot be posted to it.
template <class T>
class Watcher {
 public:
  virtual ~Watcher() = default;
  virtual void done(std::unique_ptr<Watcher> self, Result<T> result) = 0;
};

// A Watcher of the record of the outcome it holds (Ledger::record_outcome
// with a watcher). The ledger reads the outcome there, in place, and leaves
// it as it was given (but redacted) for a watcher that records it again: no
// copy of a whole answer per try.
class OutcomeWatcher : public Watcher<void> {
 public:
  Outcome outcome;
};

struct LedgerOptions {
  std::string replica_id = "replica";  // recorded on every attempt this process begins
  std::size_t queue_limit = 1024;      // queued calls beyond which callers get errc::queue_full
  std::size_t max_batch = 256;         // calls committed together (one transaction) at most
  // With two lanes, the admissions' lane's batches take at most this many
  // calls (and at most max_batch). Under a load that queues more, the
  // admissions waiting when the writer comes back go in two batches or
  // more: the first one's requests are back on the network thread, and on
  // their way upstream, while PostgreSQL writes the next, instead of the
  // two taking turns with one wave of them all (see take_batch).
  std::size_t admission_batch = 128;
  // How long an outcome recorded after its answer waits for others to share
  // its commit, with two lanes (see take_batch); a batch of its lane that
  // comes first takes it.
  Millis outcome_gather{20};  // ledger.outcome_gather
  std::uint64_t response_cap = 256 * 1024;
  config::Redact redact;
};

// Counters for /metrics; read with relaxed loads.
struct LedgerStats {
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> busy_rejections{0};
  std::atomic<std::uint64_t> reserve_batches{0};      // committed transactions that reserved
  std::atomic<std::uint64_t> reservations{0};         // requests those transactions carried
  std::atomic<std::uint64_t> errors{0};               // calls completed with an error
  // Group commit: transactions the workers ran to completion (a batch, or a
  // call alone) and the calls they carried; batched_jobs / batches is the
  // mean number of calls per durable commit. A batch that failed as a whole
  // is not counted.
  std::atomic<std::uint64_t> batches{0};
  std::atomic<std::uint64_t> batched_jobs{0};
  // Lone admissions whose statement the caller's thread sent (DirectAdmit),
  // counted in the above as well.
  std::atomic<std::uint64_t> direct_admissions{0};
  // From a call's enqueue to its result (queueing, the batch, the commit).
  LatencyHistogram latency;
};

class Ledger {
 public:
  // Opens the backend named by config.url ("sqlite:PATH" or
  // "postgresql://..."), applies migrations, turns attempts whose lease has
  // passed into unknown (any process's; never a live one), and starts the
  // workers. Fails (at start-up, not
  // on the request path) when the database is unreachable or newer.
  static Result<std::unique_ptr<Ledger>> open(const config::Ledger& config,
                                              const config::Redact& redact,
                                              std::string replica_id);

  // One worker thread per store. The stores must be migrated already.
  Ledger(std::vector<std::unique_ptr<Store>> stores, LedgerOptions options);
  // Queued calls complete with errc::shutting_down, but outcomes recorded
  // after their answers, which the workers still write; running ones finish.
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // SPEC section 2 step 7. The snapshot is redacted before it is stored.
  Awaitable<Reservation> reserve_intent(ReserveRequest request, RequestSnapshot snapshot);
  // A guarded write's run charge, reservation and (see AdmitRequest) first
  // attempt: one transaction, sharing its durable commit with the batch.
  // With a DirectAdmit, a lone admission (the admissions' writer free, none
  // queued, and the workers' last batch of admissions was one: see crowded_)
  // is sent by the calling thread itself, holding that writer meanwhile:
  // admissions arriving then queue for the workers' next batch, as they
  // would behind a worker's.
  // Boxed: every guarded write awaits one, through the proxy's helpers.
  Task<Boxed<Admission>> admit(AdmitRequest request, RequestSnapshot snapshot);
  // Steps 3-6: may this process dispatch attempt n+1 now, given the state the
  // verdict was made from? (Store::begin_attempt: compare-and-set, leased.)
  Awaitable<AttemptStart> begin_attempt(AttemptRequest request);
  // The response is redacted and capped at response_cap before it is stored.
  Awaitable<Intent> record_outcome(Outcome outcome);
  // The same for a caller that does not wait, of the outcome `watcher`
  // holds: it is told whether it was recorded (and why not), on `executor`;
  // a record kept in the background costs no coroutine, and no Intent is
  // handed back.
  void record_outcome(Executor executor, std::unique_ptr<OutcomeWatcher> watcher);
  // What record_outcome stores of the response, done now (for a caller that
  // shows it before it is recorded); this ledger's record_outcome then
  // leaves it as it is (Outcome::redacted_by), any other ledger's redacts it
  // again.
  void redact(Outcome& outcome) const;
  // The attempt was sent and no complete answer came.
  Awaitable<Intent> mark_unknown(std::int64_t intent_id, int attempt);

  Awaitable<Intent> find_intent(std::int64_t intent_id);
  Awaitable<Intent> find_intent_by_key(std::string key);
  Awaitable<std::vector<Intent>> list_intents_by_run(std::string run, int limit = 100);
  // How many intents of `run` for `tool` last answered `answer_class`,
  // `except_intent` (0: none) aside; reads no row out (Store::count_intents).
  Awaitable<std::int64_t> count_intents(std::string run, std::string tool,
                                        std::string answer_class, std::int64_t except_intent = 0);

  // Unknown intents past their TTL, oldest first: escalate each.
  Awaitable<std::vector<Intent>> list_unknown_past_ttl(int limit = 100);
  // Those not escalated yet (Store::list_unescalated_unknowns).
  Awaitable<std::vector<Intent>> list_unescalated_unknowns(int limit = 100);
  // The sweeper's background lookups to make now (Store::claim_lookups).
  Awaitable<std::vector<Intent>> claim_lookups(std::vector<LookupDue> due, int limit = 50);

  Awaitable<RunCharge> count_call(std::string run, std::int64_t budget, CallKind kind);
  Awaitable<Run> find_run(std::string run);
  Awaitable<Run> freeze_run(std::string run, std::string reason);
  Awaitable<Run> unfreeze_run(std::string run);
  Awaitable<Run> kill_run(std::string run, std::string reason);

  Awaitable<std::int64_t> persist_escalation(EscalationRequest request);
  Awaitable<Escalation> find_escalation(std::int64_t id);
  Awaitable<std::vector<Escalation>> list_escalations(std::optional<EscalationState> state,
                                                      int limit = 100);
  Awaitable<Escalation> resolve_escalation(ResolveRequest request);
  Awaitable<void> record_refusal(std::int64_t intent_id, std::string reason_code);
  // The dashboard views (Store::read_signals).
  Awaitable<Signals> read_signals(TimePoint since);

  // Called with each escalation persist_escalation wrote, after its commit,
  // on the persisting caller's executor: it must not block (the webhook
  // notifier queues and returns). Set before the first call.
  using EscalationObserver = std::function<void(std::int64_t id, const EscalationRequest&)>;
  void observe_escalations(EscalationObserver observer) { escalation_observer_ = std::move(observer); }

  // Attempts whose lease has passed (their process died or lost the answer)
  // become unknown. Returns how many intents were recovered.
  Awaitable<int> recover_expired();

  const LedgerStats& stats() const noexcept { return stats_; }
  // Reservations run again after a fresh insert was refused, every store's
  // (Store::reservation_reruns).
  std::uint64_t reservation_reruns() const noexcept;
  // Lease sweeps committed without their horizon, every store's
  // (Store::horizon_misses).
  std::uint64_t horizon_misses() const noexcept;
  // Calls waiting for a worker now (a gauge for /metrics).
  std::size_t queued();
  const LedgerOptions& options() const noexcept { return options_; }

  // Lone admissions sent from the caller's thread (Ledger::open sets it for
  // PostgreSQL). Set once, before the first call.
  void admit_directly(std::unique_ptr<DirectAdmit> direct) { direct_ = std::move(direct); }
  DirectAdmit* direct() const noexcept { return direct_.get(); }

  // The HMAC key of fingerprints (ledger.fingerprint_key_file): set once at
  // start, before any request, and the same for every process of the ledger.
  void set_fingerprint_key(std::string key) { fingerprint_key_ = std::move(key); }
  std::string_view fingerprint_key() const noexcept { return fingerprint_key_; }

  // A queued unit of work; public only for the implementation's job types.
  class Job;

  // Where a call goes in its batch: a batch takes its locks in this order,
  // by phase, then text, then number. alone: never batched (the call takes
  // locks in an order of its own, or many rows).
  struct Order {
    enum Phase { reservations, intents, unlocked, runs, alone } phase = unlocked;
    std::string text;
    std::int64_t number = 0;
    auto operator<=>(const Order&) const = default;
  };

 private:
  // A counter of every store's, summed (read from any thread).
  std::uint64_t stores_total(std::uint64_t (Store::*count)() const noexcept) const noexcept;
  template <class T, class Op>
  Awaitable<T> call(Order order, Op op);
  // Enqueues a JobT<Handler>(request, handler, stats) answering `Value`:
  // Result<T>, or Boxed<T> (see jobs::Completion).
  template <class Value, template <class> class JobT, class Request>
  Task<Value> submit(Request request);
  // Runs the batch's calls; answers none of them (the caller does, with the
  // error every call fails with, if any, once its writer lane is free).
  boost::system::error_code run_batch(Store& store, std::vector<std::unique_ptr<Job>>& batch);
  // false when the queue is full (or the ledger is stopping).
  bool enqueue(std::unique_ptr<Job> job);
  void work(Store& store);
  // The next batch this worker may take (empty: none now). Under mutex_.
  std::vector<std::unique_ptr<Job>> take_batch(std::chrono::steady_clock::time_point now);
  // May join a batch (its lane's writer is free); may start one (and its
  // gathering time is over, a batch's worth gathers, or the ledger is
  // stopping). mutex_ held.
  bool takeable(const Job& job) const;
  bool startable(const Job& job, std::chrono::steady_clock::time_point now) const;
  std::size_t gather_limit() const;
  bool full_gather() const;  // gather_limit() outcomes or more gather
  // Removes the call at `it` from the queue (it moves to the next one).
  std::unique_ptr<Job> take(std::deque<std::unique_ptr<Job>>::iterator& it);
  // When `job` may start, if takeable (a gathering outcome's not_before, or
  // later). mutex_ held.
  std::chrono::steady_clock::time_point start_time(const Job& job) const;
  bool any_startable(std::chrono::steady_clock::time_point now) const;
  // When the first takeable call that is still gathering may start.
  std::optional<std::chrono::steady_clock::time_point> next_start() const;
  // Whether an idle worker has something to do: a call it may start now,
  // or a gathering one due before the time the timed waiter (if any)
  // sleeps to. mutex_ held.
  bool worker_needed(std::chrono::steady_clock::time_point now) const;
  int lane_of(const Job& job) const;
  // A direct admission takes the admissions' writer lane when it is free, no
  // admission is queued for it, and the workers' last batch of admissions
  // was one (false: queue this one; see crowded_).
  bool claim_direct();
  void release_direct();

  LedgerOptions options_;
  LedgerStats stats_;
  EscalationObserver escalation_observer_;
  std::vector<std::unique_ptr<Store>> stores_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::unique_ptr<Job>> queue_;
  bool stopping_ = false;
  // Per writer lane (0: admissions, run charges, attempts; 1: outcomes): a
  // worker runs a batch holding that lane's locking calls.
  bool writing_[2] = {false, false};
  bool direct_writing_ = false;  // writing_[0] is a direct admission's
  // The last worker batch that carried admissions carried more than one.
  // Then the next admission goes to the workers, whose next batch it joins:
  // under load a direct admission holds the lane for a round trip and a
  // commit of its own just when the batch that queued up behind the last
  // one could start (at 256 connections that cost 7-28% of the throughput).
  // A batch of one admission clears it: the load is gone. (Admissions that
  // come while a direct one is out queue, and their batch decides.)
  bool crowded_ = false;
  bool lanes_ = false;  // concurrent writers and 3+ workers: outcomes get lane 1
  // The time a worker waits for (a gathering call's not_before), if any: a
  // call gathering until after it needs no wake-up of its own.
  std::optional<std::chrono::steady_clock::time_point> timed_wait_;
  // Queued outcomes that gather (a not_before of their own). A batch's
  // worth of them (gather_limit: max_batch, or a quarter of queue_limit if
  // less) starts at once: at a high enough rate outcome_gather would
  // otherwise hold more outcomes than a batch takes, and the queue they
  // fill (queue_limit) would refuse admissions.
  std::size_t gathering_ = 0;
  std::vector<std::thread> workers_;
  std::unique_ptr<DirectAdmit> direct_;
  // Admissions asked for so far, and whether none came while the last
  // direct admission was on the wire (then the next one may poll).
  std::atomic<std::uint64_t> admissions_{0};
  std::atomic<bool> alone_{true};
  std::string fingerprint_key_;
};

}  // namespace idemgate::ledger
