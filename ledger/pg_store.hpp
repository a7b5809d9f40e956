// The PostgreSQL backend: one libpqxx connection, used by one worker thread.
// It connects lazily and reconnects after a failure with exponential backoff
// (calls during the backoff fail fast with errc::unavailable instead of
// blocking the worker). statement_timeout bounds every statement, TCP
// keepalives bound a silent peer, and a connection lost mid-transaction
// becomes errc::unavailable. Commits are synchronous (synchronous_commit on),
// except those of a deferred batch. batch() is one transaction with a
// SAVEPOINT per method call in it; a connection lost mid-batch fails the
// whole batch with errc::unavailable. A deferred batch (outcomes recorded
// after their answers, alone) is no transaction: each of its outcome
// statements commits by itself, and its results are each call's own.
#pragma once

#include "ledger/store.hpp"

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

namespace idemgate::ledger {

class PgStore final : public Store {
 public:
  PgStore(std::string url, Millis statement_timeout);
  ~PgStore() override;

  Result<int> migrate() override;
  boost::system::error_code batch(const std::function<void()>& body, Calls calls = Calls::isolated,
                                  Durability durability = Durability::flushed) override;
  std::vector<Result<Reservation>> reserve_intents(std::span<const ReserveRequest>) override;
  Result<AttemptStart> begin_attempt(const AttemptRequest& request, const std::string& replica) override;
  std::vector<Result<AttemptStart>> begin_attempts(std::span<const AttemptRequest> requests,
                                                   const std::string& replica) override;
  std::vector<Result<RunCharge>> count_calls(std::span<const ChargeRequest> requests) override;
  bool concurrent_writers() const noexcept override { return true; }
  std::uint64_t reservation_reruns() const noexcept override {
    return reservation_reruns_.load(std::memory_order_relaxed);
  }
  std::uint64_t horizon_misses() const noexcept override { return horizon_misses_.load(std::memory_order_relaxed); }
  std::optional<Result<Admission>> admit_alone(const AdmitRequest&) override;
  Result<Admission> finish_admission(const AdmitRequest&, AdmitFirst) override;
  Result<Intent> record_outcome(const Outcome&) override;
  std::vector<Result<Intent>> record_outcomes(std::span<const Outcome>) override;
  Result<Intent> find_intent(std::int64_t intent_id) override;
  Result<Intent> find_intent_by_key(const std::string& key) override;
  Result<std::vector<Intent>> list_intents_by_run(const std::string& run, int limit) override;
  Result<std::int64_t> count_intents(const std::string& run, const std::string& tool,
                                     const std::string& answer_class,
                                     std::int64_t except_intent) override;
  Result<std::vector<Intent>> list_unknown_past_ttl(int limit) override;
  Result<std::vector<Intent>> list_unescalated_unknowns(int limit) override;
  Result<std::vector<Intent>> claim_lookups(std::span<const LookupDue> due, int limit) override;
  Result<RunCharge> count_call(const std::string& run, std::int64_t budget, CallKind) override;
  Result<Run> find_run(const std::string& run) override;
  Result<Run> set_run_state(const std::string& run, RunState, const std::string& reason) override;
  Result<std::int64_t> persist_escalation(const EscalationRequest&) override;
  Result<Escalation> find_escalation(std::int64_t id) override;
  Result<std::vector<Escalation>> list_escalations(std::optional<EscalationState>,
                                                   int limit) override;
  Result<Escalation> resolve_escalation(const ResolveRequest&) override;
  Result<void> record_refusal(std::int64_t intent_id, const std::string& reason_code) override;
  Result<Signals> read_signals(TimePoint since) override;
  Result<int> recover_expired() override;

 private:
  // Runs body(pqxx::transaction_base&) in one transaction, or in a savepoint of the open
  // batch(); returns its Result.
  // one_statement: each statement body sends commits by itself (no BEGIN
  // and COMMIT round trips): for a body whose first statement does all its
  // writing (what follows only reads); never inside batch().
  enum class Commit { transaction, one_statement };
  template <class F>
  auto transact(F&& body, Commit commit = Commit::transaction);
  template <class T, class F>
  Result<T> in_savepoint(F& body);
  // Connects when there is no connection and the backoff has passed.
  boost::system::error_code connect();
  void drop_connection();

  std::string url_;
  Millis statement_timeout_;
  struct Connection;  // pqxx::connection, kept out of this header
  std::unique_ptr<Connection> connection_;
  struct OpenBatch;  // the batch's pqxx::work and its failure, if any
  OpenBatch* batch_ = nullptr;
  // While a Durability::deferred batch runs: no transaction wraps it, and
  // each outcome statement commits by itself without waiting for the disk.
  bool deferring_ = false;
  Millis backoff_{0};
  // How many of the next reservations pass over live fingerprints (ON
  // CONFLICT) instead of inserting fresh: set after a fresh insert was
  // refused, so that a run of retries does not fail one batch after another
  // (reserve_intents).
  int careful_reservations_ = 0;
  std::atomic<std::uint64_t> reservation_reruns_{0};  // the refusals that made them careful
  std::atomic<std::uint64_t> horizon_misses_{0};      // sweeps committed without their horizon
  // When recover_expired last read the lease sweep's horizon (steady clock).
  std::optional<std::chrono::steady_clock::time_point> last_horizon_;
  std::chrono::steady_clock::time_point next_connect_{};
};

}  // namespace idemgate::ledger
