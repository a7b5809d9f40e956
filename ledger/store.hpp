// The synchronous ledger interface both backends implement. Each method is
// one database transaction and returns a Result: nothing is thrown across it.
// Inside batch() the methods share one transaction instead (group commit),
// each in its own savepoint. A Store is one thread's at a time (it owns one
// connection); the async Ledger facade gives each worker thread its own Store.
#pragma once

#include "ledger/errc.hpp"
#include "ledger/types.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace idemgate::ledger {

class Store {
 public:
  virtual ~Store() = default;

  // Applies missing migrations; returns the schema version now in force.
  // errc::newer_schema when the database is ahead of this binary;
  // errc::old_server when its PostgreSQL server is older than 14 (which
  // any call of a PostgreSQL store may answer: its connections are checked).
  virtual Result<int> migrate() = 0;

  // Group commit: opens one write transaction, runs body, and commits it
  // once (one durable commit for everything body did). While body runs,
  // every method called on this Store runs inside that transaction in its
  // own savepoint: a method that fails (illegal_transition, not_found,
  // busy...) rolls back to its savepoint only and returns its error, and the
  // batch goes on. The returned error is the transaction's own (connection
  // lost, commit failed, disk full): when set, nothing body did is known to
  // be written, every Result body collected must be discarded, and the
  // methods body called after the failure returned that error at once.
  // Not reentrant. The default runs body with no shared transaction (every
  // method commits by itself), for stores that do not batch.
  //
  // With Calls::together (a batch of one caller's calls) there are no
  // savepoints: the first method that fails fails the batch, nothing body did
  // is written, and batch() returns that method's error.
  //
  // With Durability::deferred the commit returns before the write is on
  // disk (a crash of the database, not of this process, may lose it): only
  // for batches of records whose loss is recovered some other way
  // (Outcome::after_answer). Nothing else is weakened: the commit is atomic
  // and visible to every reader when batch() returns, and a later flushed
  // commit makes it durable too (both databases write their log in order).
  // Such a batch holds record_outcome(s) calls alone, and a store may commit
  // each call of it by itself instead of in one transaction (PostgreSQL
  // does: each round of outcomes is one statement, saving the BEGIN and
  // COMMIT round trips). Then each call's Result is its own, written or not,
  // and batch() fails only when body could not run at all.
  enum class Calls { isolated, together };
  enum class Durability { flushed, deferred };
  virtual boost::system::error_code batch(const std::function<void()>& body, Calls calls = Calls::isolated,
                                          Durability durability = Durability::flushed) {
    (void)calls;
    (void)durability;
    body();
    return {};
  }

  // True when two connections can write at once without one waiting for
  // the other's commit (PostgreSQL row locks; not SQLite's database lock).
  virtual bool concurrent_writers() const noexcept { return false; }
  // Reservations this store ran again after inserting them fresh was
  // refused by a live fingerprint (PostgreSQL, reserve_intents); read from
  // any thread.
  virtual std::uint64_t reservation_reruns() const noexcept { return 0; }
  // Lease sweeps this store committed without reading their horizon
  // (PostgreSQL, recover_expired: the lease lock did not come within its
  // lock_timeout, or the statement timeout if that is shorter, while
  // admissions held it): their first attempts begun with their reservations
  // wait for the next sweep. Read from any thread.
  virtual std::uint64_t horizon_misses() const noexcept { return 0; }

  // A lone admission (Ledger::admit with nothing else queued) as the store
  // does it fastest: the run charge, the reservation and, when the charge
  // counted and request.first_attempt is set, the first attempt begun with
  // the reservation (Reservation::started), with the same results the batch
  // (count_calls, reserve_intents with a start) gives. nullopt: not done,
  // nothing written; the Ledger then runs the batch.
  virtual std::optional<Result<Admission>> admit_alone(const AdmitRequest&) { return std::nullopt; }
  // What admit_alone's one statement did, when it did not do the whole
  // admission (the charge refused, or a live intent holds the fingerprint):
  // the rest of it, as admit_alone does it after that statement. For a
  // lone admission whose statement was sent by a DirectAdmit.
  virtual Result<Admission> finish_admission(const AdmitRequest&, AdmitFirst) {
    return Result<Admission>(boost::system::error_code(errc::storage_failure));
  }

  // Reserves each request, all in one transaction (group commit). For each
  // scope+fingerprint exactly one caller across all processes gets
  // ReserveOutcome::reserved; the others get the live row. Results are in
  // request order; a failed transaction fails every request. In a batch
  // with Calls::together it may fail the batch with errc::conflict, nothing
  // written, when a fingerprint is live already (PostgreSQL inserts fresh
  // first): run the batch again, and its reservations pass over live rows.
  virtual std::vector<Result<Reservation>> reserve_intents(
      std::span<const ReserveRequest> requests) = 0;

  // Compare-and-set: moves the intent to dispatched and records attempt
  // number attempts+1 for `replica`, owned until now + request.lease, only
  // if the intent is still in expected_state with expected_attempts (what
  // the verdict was made from), that state is dispatchable, attempts_spent()
  // < max_attempts and any Retry-After has passed. Otherwise says why not
  // (AttemptOutcome; changed: decide again) without writing.
  virtual Result<AttemptStart> begin_attempt(const AttemptRequest& request,
                                             const std::string& replica) = 0;

  // begin_attempt for each request, in request order. One result per request.
  virtual std::vector<Result<AttemptStart>> begin_attempts(std::span<const AttemptRequest> requests,
                                                           const std::string& replica) {
    std::vector<Result<AttemptStart>> out;
    out.reserve(requests.size());
    for (const auto& r : requests) out.push_back(begin_attempt(r, replica));
    return out;
  }

  // Settles an attempt (or an intent without one, see Outcome). Rejected with
  // errc::illegal_transition when the intent is not in a state the move may
  // start from (completed never goes back; the answer of an attempt is
  // refused once another attempt began). Settling an intent as completed,
  // denied or retryable also settles its open money_unknown /
  // tool_outcome_unknown escalations (state completed, resolved_by idemgate).
  // An outcome after its answer (Outcome::after_answer) may come back as the
  // intent's id and new state alone: its recorder only needs to know that
  // it landed, and the whole row (the stored response with it) would cross
  // the wire for nothing.
  virtual Result<Intent> record_outcome(const Outcome& outcome) = 0;
  // record_outcome for each outcome, applied in order (an intent's second
  // outcome after its first). One result per outcome, in outcome order.
  virtual std::vector<Result<Intent>> record_outcomes(std::span<const Outcome> outcomes) {
    std::vector<Result<Intent>> out;
    out.reserve(outcomes.size());
    for (const auto& o : outcomes) out.push_back(record_outcome(o));
    return out;
  }

  virtual Result<Intent> find_intent(std::int64_t intent_id) = 0;
  // By the key sent upstream or an agent key bound to the intent; the newest.
  virtual Result<Intent> find_intent_by_key(const std::string& key) = 0;
  virtual Result<std::vector<Intent>> list_intents_by_run(const std::string& run,
                                                          int limit) = 0;
  // How many intents of `run` for `tool` last answered `answer_class`
  // (policy::AnswerClass name), not counting `except_intent` (0: none).
  // Reads no rows out, unlike list_intents_by_run.
  virtual Result<std::int64_t> count_intents(const std::string& run, const std::string& tool,
                                             const std::string& answer_class,
                                             std::int64_t except_intent) = 0;

  // Unknown intents whose unknown_ttl has run out (oldest first): each is
  // escalated (tool_outcome_unknown / money_unknown), never silently kept.
  virtual Result<std::vector<Intent>> list_unknown_past_ttl(int limit) = 0;
  // The same, less those that already have a money_unknown or
  // tool_outcome_unknown escalation in any state: what the escalation
  // sweeper has still to escalate.
  virtual Result<std::vector<Intent>> list_unescalated_unknowns(int limit) = 0;
  // Claims the one background lookup of up to `limit` unknown intents whose
  // lookup is due (an intent of due[i].tool unknown for at least
  // due[i].after) and was never claimed, oldest first, and returns them. An
  // intent is claimed once, by one caller across all processes, and never
  // again (also when its lookup then fails): the lookup is at most once.
  virtual Result<std::vector<Intent>> claim_lookups(std::span<const LookupDue> due, int limit) = 0;

  // Counts one call against the run's budget (creating the run with `budget`
  // on first sight). Does not count when the run is killed, or frozen and the
  // call is a write, or the budget is spent.
  virtual Result<RunCharge> count_call(const std::string& run, std::int64_t budget,
                                       CallKind kind) = 0;
  // count_call for each request, in request order (a batch passes them
  // sorted by run: the lock order). One result per request.
  virtual std::vector<Result<RunCharge>> count_calls(std::span<const ChargeRequest> requests) {
    std::vector<Result<RunCharge>> out;
    out.reserve(requests.size());
    for (const auto& r : requests) out.push_back(count_call(r.run, r.budget, r.kind));
    return out;
  }
  virtual Result<Run> find_run(const std::string& run) = 0;
  // active <-> frozen; any -> killed; killed is final (illegal_transition).
  virtual Result<Run> set_run_state(const std::string& run, RunState state,
                                    const std::string& reason) = 0;

  // One open escalation per intent and reason: a second package for the
  // same (intent, reason) while one is open replaces its package and returns
  // its id.
  virtual Result<std::int64_t> persist_escalation(const EscalationRequest& request) = 0;
  virtual Result<Escalation> find_escalation(std::int64_t id) = 0;
  // Newest first; nullopt: every state.
  virtual Result<std::vector<Escalation>> list_escalations(
      std::optional<EscalationState> state, int limit) = 0;
  // Only an open escalation can be resolved. complete settles its intent as
  // completed with the receipt; deny settles it as denied; approve leaves it.
  virtual Result<Escalation> resolve_escalation(const ResolveRequest& request) = 0;

  // A refusal of a repeat (same fingerprint at the bound, validation
  // repeated...), counted for the dashboards.
  virtual Result<void> record_refusal(std::int64_t intent_id, const std::string& reason_code) = 0;

  // The dashboard views: hourly series from `since` on, the rest whole.
  virtual Result<Signals> read_signals(TimePoint since) = 0;

  // Crash recovery: attempts still dispatched whose lease has passed, begun
  // by any process, become unknown (recovered). A live lease is never
  // touched: its process may still be waiting for the answer. Returns how
  // many intents were recovered.
  virtual Result<int> recover_expired() = 0;
};

}  // namespace idemgate::ledger
