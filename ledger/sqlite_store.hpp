// The embedded backend: one SQLite file in WAL mode with synchronous=FULL, so
// a reservation is on disk before reserve_intents returns. Several
// SqliteStores (threads or processes) may share one file: writes serialise on
// the file lock (BEGIN IMMEDIATE), waiting at most busy_timeout.
#pragma once

#include "ledger/sqlite_statement.hpp"
#include "ledger/store.hpp"

#include <string>

struct sqlite3;

namespace idemgate::ledger {

class SqliteStore final : public Store {
 public:
  // Opens (creating) the file. Does not migrate.
  static Result<std::unique_ptr<SqliteStore>> open(const std::string& path, Millis busy_timeout);
  ~SqliteStore() override;

  Result<int> migrate() override;
  // BEGIN IMMEDIATE ... SAVEPOINT/RELEASE (ROLLBACK TO) per method ... COMMIT.
  boost::system::error_code batch(const std::function<void()>& body, Calls calls = Calls::isolated,
                                  Durability durability = Durability::flushed) override;
  std::vector<Result<Reservation>> reserve_intents(std::span<const ReserveRequest>) override;
  Result<AttemptStart> begin_attempt(const AttemptRequest& request, const std::string& replica) override;
  Result<Intent> record_outcome(const Outcome&) override;
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
  explicit SqliteStore(sqlite3* db) : db_(db) {}

  enum class Lock { read, write };
  // Its own transaction, or a savepoint inside the open batch().
  template <class F>
  auto transact(Lock lock, F&& body) -> Result<std::invoke_result_t<F&>>;
  template <class F>
  auto in_savepoint(F& body) -> Result<std::invoke_result_t<F&>>;

  Intent load_intent(std::int64_t id);
  std::optional<Run> load_run(const std::string& run);
  Escalation load_escalation(std::int64_t id);
  Reservation reserve_one(const ReserveRequest&, std::int64_t now);
  // begin_attempt's body, in the open transaction.
  // with_row false: a first attempt begun with its reservation, which lives
  // on its intent (its attempts row is written when it ends unknown, or,
  // answered, when something changes its intent: keep_first_attempt).
  AttemptStart begin_one(const AttemptRequest&, const std::string& replica, std::int64_t now, bool with_row = true);
  // Writes the attempts row of the answered first attempt an intent keeps
  // (attempts_on_intents, schema version 12), if it keeps one: called before
  // anything changes that intent (a second attempt, a refusal without an
  // attempt, an operator's resolution).
  void keep_first_attempt(std::int64_t intent_id);
  // The open unknown escalations of an intent its answer settled.
  void settle_unknown_escalations(std::int64_t intent_id, const std::string& answer_class,
                                  const std::string& receipt, std::int64_t now);

  sqlite::Connection db_;
  bool in_batch_ = false;
  bool together_ = false;  // the open batch is Calls::together
  boost::system::error_code batch_error_;  // the open batch's transaction failed
};

}  // namespace idemgate::ledger
