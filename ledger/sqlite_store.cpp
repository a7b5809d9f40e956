// The SQLite backend (see sqlite_store.hpp). Every method is one transaction,
// or one savepoint of the open batch(); SqliteError and detail::Abort thrown
// inside become Results at transact().
#include "ledger/sqlite_store.hpp"

#include "ledger/migrations.hpp"
#include "ledger/sqlite_statement.hpp"
#include "ledger/store_support.hpp"
#include "ledger/transitions.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <utility>

namespace idemgate::ledger {

using sqlite::Statement;
using namespace detail;

namespace {

constexpr std::string_view intent_columns =
    "id, run_id, tool, scope, fingerprint, idem_key, state, answer_class, attempts, status, "
    "receipt, response_status, response_headers, response_body, response_truncated, "
    "request_snapshot, window_ms, unknown_ttl_ms, recovered, created_at, updated_at, "
    "window_until, unknown_since, retry_not_before, lease_until, waived, looked_up_at";

constexpr std::string_view escalation_columns =
    "id, run_id, intent_id, reason_code, package, state, receipt, note, created_at, resolved_at, "
    "resolved_by";

boost::system::error_code map_sqlite(int code) {
  switch (code) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return errc::busy;
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT: return errc::unavailable;
    default: return errc::storage_failure;
  }
}

std::string sql(std::string_view a, std::string_view b = {}, std::string_view c = {}) {
  std::string s(a);
  s += b;
  s += c;
  return s;
}

}  // namespace

Result<std::unique_ptr<SqliteStore>> SqliteStore::open(const std::string& path,
                                                       Millis busy_timeout) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  std::unique_ptr<SqliteStore> store(new SqliteStore(db));
  if (rc != SQLITE_OK) return boost::system::error_code(errc::unavailable);
  try {
    sqlite3_busy_timeout(db, static_cast<int>(busy_timeout.count()));
    // WAL + FULL: a committed reservation survives power loss, and readers do
    // not block the writer.
    sqlite::exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;");
  } catch (const sqlite::SqliteError& e) {
    return map_sqlite(e.code);
  }
  return store;
}

SqliteStore::~SqliteStore() { sqlite3_close_v2(db_); }

template <class F>
auto SqliteStore::in_savepoint(F& body) -> Result<std::invoke_result_t<F&>> {
  using T = std::invoke_result_t<F&>;
  if (batch_error_) return batch_error_;
  try {
    sqlite::exec(db_, "SAVEPOINT job");
  } catch (const sqlite::SqliteError& e) {
    batch_error_ = map_sqlite(e.code);
    return batch_error_;
  }
  boost::system::error_code error;
  try {
    if constexpr (std::is_void_v<T>) {
      body();
      sqlite::exec(db_, "RELEASE job");
      return {};
    } else {
      T value = body();
      sqlite::exec(db_, "RELEASE job");
      return value;
    }
  } catch (const Abort& a) {
    error = a.code;
  } catch (const sqlite::SqliteError& e) {
    error = map_sqlite(e.code);
  } catch (const std::exception&) {
    error = errc::storage_failure;
  }
  // Some errors (I/O, disk full) make SQLite roll the whole transaction back:
  // then the batch has failed. Otherwise only this method's part is undone,
  // and with Calls::together the batch fails too (nothing of it is written).
  if (sqlite3_get_autocommit(db_) || together_) {
    batch_error_ = error;
  } else if (sqlite3_exec(db_, "ROLLBACK TO job; RELEASE job", nullptr, nullptr, nullptr) !=
             SQLITE_OK) {
    batch_error_ = errc::storage_failure;
  }
  return error;
}

boost::system::error_code SqliteStore::batch(const std::function<void()>& body, Calls calls, Durability durability) {
  if (in_batch_) return errc::invalid_argument;
  // Savepoints cost nothing here (no round trip): Calls::together keeps them
  // and only makes the first failure the batch's.
  together_ = calls == Calls::together;
  // In WAL mode, NORMAL commits without syncing the WAL: a crash of this
  // process loses nothing, a power cut may lose the last such commits (the
  // next FULL commit syncs them with its own).
  struct Synchronous {
    sqlite3* db;
    bool deferred;
    Synchronous(sqlite3* d, bool lazy) : db(d), deferred(lazy) {
      if (deferred) sqlite3_exec(db, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr);
    }
    ~Synchronous() {
      if (!deferred) return;
      // The level cannot change inside a transaction: one left open by a
      // failed ROLLBACK is ended first, or the next admission would commit
      // at NORMAL.
      if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      sqlite3_exec(db, "PRAGMA synchronous=FULL", nullptr, nullptr, nullptr);
    }
  } synchronous(db_, durability == Durability::deferred);
  try {
    sqlite::exec(db_, "BEGIN IMMEDIATE");
  } catch (const sqlite::SqliteError& e) {
    return map_sqlite(e.code);
  }
  in_batch_ = true;
  batch_error_ = {};
  try {
    body();
  } catch (const std::exception&) {
    if (!batch_error_) batch_error_ = errc::storage_failure;
  }
  in_batch_ = false;
  if (!batch_error_) {
    try {
      sqlite::exec(db_, "COMMIT");
      return {};
    } catch (const sqlite::SqliteError& e) {
      batch_error_ = map_sqlite(e.code);
    }
  }
  if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  return std::exchange(batch_error_, {});
}

template <class F>
auto SqliteStore::transact(Lock lock, F&& body) -> Result<std::invoke_result_t<F&>> {
  using T = std::invoke_result_t<F&>;
  if (in_batch_) return in_savepoint(body);
  try {
    // IMMEDIATE takes the write lock up front, so a read-then-write inside
    // never deadlocks against another writer (it waits busy_timeout instead).
    sqlite::exec(db_, lock == Lock::write ? "BEGIN IMMEDIATE" : "BEGIN");
  } catch (const sqlite::SqliteError& e) {
    return map_sqlite(e.code);
  }
  try {
    if constexpr (std::is_void_v<T>) {
      body();
      sqlite::exec(db_, "COMMIT");
      return {};
    } else {
      T value = body();
      sqlite::exec(db_, "COMMIT");
      return value;
    }
  } catch (const Abort& a) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return boost::system::error_code(a.code);
  } catch (const sqlite::SqliteError& e) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return map_sqlite(e.code);
  } catch (const std::exception&) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return boost::system::error_code(errc::storage_failure);
  }
}

Result<int> SqliteStore::migrate() {
  return transact(Lock::write, [&] {
    sqlite::exec(db_,
                 "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                 "name TEXT NOT NULL, applied_at INTEGER NOT NULL DEFAULT 0)");
    // Finalized before the scripts run: a DROP fails (SQLITE_LOCKED) while
    // a statement of the connection is still open.
    int version = [&] {
      Statement current(db_, "SELECT coalesce(max(version), 0) FROM schema_version");
      current.step();
      return static_cast<int>(current.int64(0));
    }();
    auto migrations = sqlite_migrations();
    if (version > latest_version(migrations)) throw Abort{errc::newer_schema};
    for (const auto& m : migrations) {
      if (m.version <= version) continue;
      sqlite::exec(db_, m.sql);
      Statement(db_, "INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)")
          .bind(1, std::int64_t{m.version})
          .bind(2, m.name)
          .bind(3, now_epoch_ms())
          .run();
      version = m.version;
    }
    return version;
  });
}

Intent SqliteStore::load_intent(std::int64_t id) {
  Statement s(db_, sql("SELECT ", intent_columns, " FROM intents WHERE id = ?"));
  s.bind(1, id);
  if (!s.step()) throw Abort{errc::not_found};
  return read_intent(s);
}

Reservation SqliteStore::reserve_one(const ReserveRequest& r, std::int64_t now) {
  if (!r.agent_key.empty()) {
    Statement bound(db_, "SELECT fingerprint, intent_id FROM agent_keys "
                         "WHERE scope = ? AND agent_key = ?");
    bound.bind(1, r.scope).bind(2, r.agent_key);
    if (bound.step() && bound.text(0) != r.fingerprint)
      return {ReserveOutcome::key_mismatch, load_intent(bound.int64(1))};
  }
  // A live intent whose window has passed and that holds no unresolved
  // dispatch gives its fingerprint up to the new reservation.
  Statement(db_, sql("UPDATE intents SET superseded = 1 WHERE scope = ? AND fingerprint = ? "
                     "AND superseded = 0 AND window_until <= ? AND ",
                     sql_state_guard({IntentState::reserved, IntentState::completed,
                                      IntentState::denied, IntentState::retryable})))
      .bind(1, r.scope)
      .bind(2, r.fingerprint)
      .bind(3, now)
      .run();
  Reservation result;
  Statement live(db_, "SELECT id FROM intents WHERE scope = ? AND fingerprint = ? AND superseded = 0");
  live.bind(1, r.scope).bind(2, r.fingerprint);
  if (live.step()) {
    result = {ReserveOutcome::existing, load_intent(live.int64(0))};
  } else {
    Statement insert(
        db_,
        "INSERT INTO intents (run_id, tool, scope, fingerprint, idem_key, state, "
        "request_snapshot, window_ms, unknown_ttl_ms, created_at, updated_at, window_until) "
        "VALUES (?, ?, ?, ?, ?, 'reserved', ?, ?, ?, ?, ?, ?) RETURNING id");
    insert.bind(1, r.run).bind(2, r.tool).bind(3, r.scope).bind(4, r.fingerprint).bind(5, r.key);
    insert.bind(6, r.request_snapshot).bind(7, std::int64_t{r.window.count()});
    insert.bind(8, std::int64_t{r.unknown_ttl.count()}).bind(9, now).bind(10, now);
    insert.bind(11, now + r.window.count());
    insert.step();
    auto id = insert.int64(0);
    insert.run();
    result = {ReserveOutcome::reserved, load_intent(id)};
  }
  if (!r.agent_key.empty())
    Statement(db_, "INSERT INTO agent_keys (scope, agent_key, fingerprint, intent_id, created_at) "
                   "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING")
        .bind(1, r.scope)
        .bind(2, r.agent_key)
        .bind(3, r.fingerprint)
        .bind(4, result.intent.id)
        .bind(5, now)
        .run();
  return result;
}

std::vector<Result<Reservation>> SqliteStore::reserve_intents(
    std::span<const ReserveRequest> requests) {
  std::vector<Result<Reservation>> results(requests.size(),
                                           boost::system::error_code(errc::invalid_argument));
  auto batch = transact(Lock::write, [&] {
    auto now = now_epoch_ms();
    std::vector<Result<Reservation>> done = results;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (!valid(requests[i])) continue;
      auto reservation = reserve_one(requests[i], now);
      if (reservation.outcome == ReserveOutcome::reserved && requests[i].start) {
        const auto& start = *requests[i].start;
        auto begun = begin_one(AttemptRequest{reservation.intent.id, IntentState::reserved, 0, 1, start.lease},
                               start.replica, now);
        if (begun.outcome != AttemptOutcome::started) throw Abort{errc::conflict};  // a fresh row always begins
        reservation.intent = std::move(begun.intent);
        reservation.started = true;
      }
      done[i] = std::move(reservation);
    }
    return done;
  });
  if (!batch) {
    for (auto& r : results) r = batch.error();
    return results;
  }
  return std::move(*batch);
}

Result<AttemptStart> SqliteStore::begin_attempt(const AttemptRequest& r, const std::string& replica) {
  return transact(Lock::write, [&] { return begin_one(r, replica, now_epoch_ms()); });
}

AttemptStart SqliteStore::begin_one(const AttemptRequest& r, const std::string& replica, std::int64_t now) {
  {
    auto lease_until = now + r.lease.count();
    int changed =
        Statement(db_, sql("UPDATE intents SET state = 'dispatched', attempts = attempts + 1, "
                           "lease_until = ?4, updated_at = ?1 WHERE id = ?2 AND state = ?5 AND "
                           "attempts = ?6 AND attempts - waived < ?3 AND "
                           "(retry_not_before IS NULL OR retry_not_before <= ?1) AND ",
                           sql_state_guard(dispatchable_states())))
            .bind(1, now)
            .bind(2, r.intent_id)
            .bind(3, std::int64_t{r.max_attempts})
            .bind(4, lease_until)
            .bind(5, to_string(r.expected_state))
            .bind(6, std::int64_t{r.expected_attempts})
            .run();
    if (changed == 0) {
      auto intent = load_intent(r.intent_id);
      auto why = refusal_reason(intent, r);
      return AttemptStart{why, 0, std::move(intent)};
    }
    auto intent = load_intent(r.intent_id);
    Statement(db_, "INSERT INTO attempts (intent_id, number, replica_id, state, started_at, lease_until) "
                   "VALUES (?, ?, ?, 'dispatched', ?, ?)")
        .bind(1, r.intent_id)
        .bind(2, std::int64_t{intent.attempts})
        .bind(3, replica)
        .bind(4, now)
        .bind(5, lease_until)
        .run();
    return AttemptStart{AttemptOutcome::started, intent.attempts, std::move(intent)};
  }
}

Result<Intent> SqliteStore::record_outcome(const Outcome& o) {
  return transact(Lock::write, [&] {
    auto now = now_epoch_ms();
    bool with_attempt = o.attempt > 0;
    auto sources = settle_sources(o.state, with_attempt);
    std::string text =
        "UPDATE intents SET state = ?1, answer_class = ?2, status = ?3, "
        "receipt = CASE WHEN ?4 = '' THEN receipt ELSE ?4 END, updated_at = ?5, "
        "unknown_since = CASE WHEN ?1 = 'unknown' THEN coalesce(unknown_since, ?5) ELSE NULL END, "
        "retry_not_before = ?6, lease_until = NULL, waived = waived + ?13";
    if (o.response)
      text += ", response_status = ?7, response_headers = ?8, response_body = ?9, "
              "response_truncated = ?10";
    text += " WHERE id = ?11 AND " + sql_state_guard(sources);
    if (with_attempt) text += " AND attempts = ?12";
    Statement update(db_, text);
    update.bind(1, to_string(o.state)).bind(2, o.answer_class);
    update.bind(3, o.status ? std::optional<std::int64_t>(*o.status) : std::nullopt);
    update.bind(4, o.receipt).bind(5, now);
    update.bind(6, o.retry_after ? std::optional<std::int64_t>(now + o.retry_after->count())
                                 : std::nullopt);
    if (o.response) {
      update.bind(7, std::int64_t{o.response->status});
      update.bind(8, encode_headers(o.response->headers));
      update.bind_blob(9, o.response->body);
      update.bind(10, std::int64_t{o.response->truncated});
    }
    update.bind(11, o.intent_id);
    if (with_attempt) update.bind(12, std::int64_t{o.attempt});
    update.bind(13, std::int64_t{o.waive ? 1 : 0});
    if (update.run() == 0) {
      load_intent(o.intent_id);  // not_found when there is no such intent
      throw Abort{errc::illegal_transition};
    }
    if (with_attempt)
      Statement(db_, "UPDATE attempts SET state = ?, answer_class = ?, status = ?, receipt = ?, "
                     "finished_at = ? WHERE intent_id = ? AND number = ? AND state IN ('dispatched', 'unknown')")
          .bind(1, to_string(o.state == IntentState::unknown ? AttemptState::unknown
                                                             : AttemptState::answered))
          .bind(2, o.answer_class)
          .bind(3, o.status ? std::optional<std::int64_t>(*o.status) : std::nullopt)
          .bind(4, o.receipt)
          .bind(5, now)
          .bind(6, o.intent_id)
          .bind(7, std::int64_t{o.attempt})
          .run();
    if (o.state != IntentState::unknown) settle_unknown_escalations(o.intent_id, o.answer_class, o.receipt, now);
    return load_intent(o.intent_id);
  });
}

Result<Intent> SqliteStore::find_intent(std::int64_t intent_id) {
  return transact(Lock::read, [&] { return load_intent(intent_id); });
}

Result<Intent> SqliteStore::find_intent_by_key(const std::string& key) {
  return transact(Lock::read, [&] {
    Statement s(db_, sql("SELECT ", intent_columns,
                         " FROM intents WHERE idem_key = ?1 OR id IN "
                         "(SELECT intent_id FROM agent_keys WHERE agent_key = ?1) "
                         "ORDER BY id DESC LIMIT 1"));
    s.bind(1, key);
    if (!s.step()) throw Abort{errc::not_found};
    return read_intent(s);
  });
}

Result<std::vector<Intent>> SqliteStore::list_intents_by_run(const std::string& run, int limit) {
  return transact(Lock::read, [&] {
    Statement s(db_, sql("SELECT ", intent_columns,
                         " FROM intents WHERE run_id = ? ORDER BY id DESC LIMIT ?"));
    s.bind(1, run).bind(2, std::int64_t{limit});
    std::vector<Intent> out;
    while (s.step()) out.push_back(read_intent(s));
    return out;
  });
}

Result<std::int64_t> SqliteStore::count_intents(const std::string& run, const std::string& tool,
                                                const std::string& answer_class,
                                                std::int64_t except_intent) {
  return transact(Lock::read, [&] {
    Statement s(db_, "SELECT count(*) FROM intents WHERE run_id = ? AND tool = ? AND "
                     "answer_class = ? AND id <> ?");
    s.bind(1, run).bind(2, tool).bind(3, answer_class).bind(4, except_intent);
    s.step();
    return s.int64(0);
  });
}

Result<std::vector<Intent>> SqliteStore::list_unknown_past_ttl(int limit) {
  return transact(Lock::read, [&] {
    Statement s(db_, sql("SELECT ", intent_columns,
                         " FROM intents WHERE state = 'unknown' AND unknown_since + "
                         "unknown_ttl_ms <= ? ORDER BY unknown_since LIMIT ?"));
    s.bind(1, now_epoch_ms()).bind(2, std::int64_t{limit});
    std::vector<Intent> out;
    while (s.step()) out.push_back(read_intent(s));
    return out;
  });
}

Result<std::vector<Intent>> SqliteStore::list_unescalated_unknowns(int limit) {
  return transact(Lock::read, [&] {
    Statement s(db_, sql("SELECT ", intent_columns,
                         " FROM intents i WHERE state = 'unknown' AND unknown_since + "
                         "unknown_ttl_ms <= ? AND NOT EXISTS (SELECT 1 FROM escalations e WHERE "
                         "e.intent_id = i.id AND e.reason_code IN ('money_unknown', 'tool_outcome_unknown')) "
                         "ORDER BY unknown_since LIMIT ?"));
    s.bind(1, now_epoch_ms()).bind(2, std::int64_t{limit});
    std::vector<Intent> out;
    while (s.step()) out.push_back(read_intent(s));
    return out;
  });
}

Result<std::vector<Intent>> SqliteStore::claim_lookups(std::span<const LookupDue> due, int limit) {
  if (due.empty()) return std::vector<Intent>{};
  return transact(Lock::write, [&] {
    std::string text =
        "UPDATE intents SET looked_up_at = ? WHERE id IN (SELECT id FROM intents WHERE state = 'unknown' AND "
        "looked_up_at IS NULL AND (";
    for (std::size_t i = 0; i < due.size(); ++i) {
      if (i) text += " OR ";
      text += "(tool = ? AND unknown_since + ? <= ?)";
    }
    text += sql(") ORDER BY unknown_since LIMIT ?) RETURNING ", intent_columns);
    Statement s(db_, text);
    auto const now = now_epoch_ms();
    int n = 1;
    s.bind(n++, now);
    for (auto const& d : due) {
      s.bind(n, d.tool).bind(n + 1, std::int64_t{d.after.count()}).bind(n + 2, now);
      n += 3;
    }
    s.bind(n, std::int64_t{limit});
    std::vector<Intent> out;
    while (s.step()) out.push_back(read_intent(s));
    std::sort(out.begin(), out.end(), [](const Intent& a, const Intent& b) { return a.unknown_since < b.unknown_since; });
    return out;
  });
}

std::optional<Run> SqliteStore::load_run(const std::string& run) {
  Statement s(db_, "SELECT run_id, state, calls, budget, reason FROM runs WHERE run_id = ?");
  s.bind(1, run);
  if (!s.step()) return std::nullopt;
  return Run{s.text(0), parse_run_state(s.text(1)).value_or(RunState::killed), s.int64(2),
             s.int64(3), s.text(4)};
}

Result<RunCharge> SqliteStore::count_call(const std::string& run, std::int64_t budget,
                                          CallKind kind) {
  return transact(Lock::write, [&] {
    auto now = now_epoch_ms();
    Statement(db_, "INSERT INTO runs (run_id, budget, created_at, updated_at) VALUES (?, ?, ?, ?) "
                   "ON CONFLICT (run_id) DO NOTHING")
        .bind(1, run)
        .bind(2, budget)
        .bind(3, now)
        .bind(4, now)
        .run();
    int counted = Statement(db_, "UPDATE runs SET calls = calls + 1, updated_at = ? "
                                 "WHERE run_id = ? AND calls < budget AND "
                                 "(state = 'active' OR (state = 'frozen' AND ? = 0))")
                      .bind(1, now)
                      .bind(2, run)
                      .bind(3, std::int64_t{kind == CallKind::write})
                      .run();
    auto current = *load_run(run);
    return RunCharge{counted ? ChargeOutcome::counted : charge_refusal(current, kind),
                     current.calls, current.budget};
  });
}

Result<Run> SqliteStore::find_run(const std::string& run) {
  return transact(Lock::read, [&] {
    auto found = load_run(run);
    if (!found) throw Abort{errc::not_found};
    return *found;
  });
}

Result<Run> SqliteStore::set_run_state(const std::string& run, RunState state,
                                       const std::string& reason) {
  return transact(Lock::write, [&] {
    auto current = load_run(run);
    if (!current) throw Abort{errc::not_found};
    if (!run_transition_allowed(current->state, state)) throw Abort{errc::illegal_transition};
    // The guard repeats the rule in SQL: a killed run never comes back.
    Statement(db_, "UPDATE runs SET state = ?, reason = ?, updated_at = ? "
                   "WHERE run_id = ? AND (state <> 'killed' OR ? = 'killed')")
        .bind(1, to_string(state))
        .bind(2, reason)
        .bind(3, now_epoch_ms())
        .bind(4, run)
        .bind(5, to_string(state))
        .run();
    return *load_run(run);
  });
}

Result<std::int64_t> SqliteStore::persist_escalation(const EscalationRequest& r) {
  return transact(Lock::write, [&] {
    Statement s(db_, "INSERT INTO escalations (run_id, intent_id, reason_code, package, created_at) "
                     "VALUES (?, ?, ?, ?, ?) ON CONFLICT (intent_id, reason_code) "
                     "WHERE state = 'open' AND intent_id IS NOT NULL "
                     "DO UPDATE SET package = excluded.package RETURNING id");
    s.bind(1, r.run).bind(2, r.intent_id).bind(3, r.reason_code).bind(4, r.package_json);
    s.bind(5, now_epoch_ms());
    s.step();
    auto id = s.int64(0);
    s.run();
    return id;
  });
}

void SqliteStore::settle_unknown_escalations(std::int64_t intent_id, const std::string& answer_class,
                                             const std::string& receipt, std::int64_t now) {
  Statement(db_, "UPDATE escalations SET state = 'completed', resolved_by = 'idemgate', receipt = ?1, "
                 "note = 'settled by reconciliation: ' || ?2, resolved_at = ?3 WHERE intent_id = ?4 "
                 "AND state = 'open' AND reason_code IN ('money_unknown', 'tool_outcome_unknown')")
      .bind(1, receipt)
      .bind(2, answer_class)
      .bind(3, now)
      .bind(4, intent_id)
      .run();
}

Escalation SqliteStore::load_escalation(std::int64_t id) {
  Statement s(db_, sql("SELECT ", escalation_columns, " FROM escalations WHERE id = ?"));
  s.bind(1, id);
  if (!s.step()) throw Abort{errc::not_found};
  return read_escalation(s);
}

Result<Escalation> SqliteStore::find_escalation(std::int64_t id) {
  return transact(Lock::read, [&] { return load_escalation(id); });
}

Result<std::vector<Escalation>> SqliteStore::list_escalations(std::optional<EscalationState> state,
                                                              int limit) {
  return transact(Lock::read, [&] {
    Statement s(db_, sql("SELECT ", escalation_columns,
                         " FROM escalations WHERE (?1 = '' OR state = ?1) ORDER BY id DESC LIMIT ?2"));
    s.bind(1, state ? to_string(*state) : std::string_view{}).bind(2, std::int64_t{limit});
    std::vector<Escalation> out;
    while (s.step()) out.push_back(read_escalation(s));
    return out;
  });
}

Result<Escalation> SqliteStore::resolve_escalation(const ResolveRequest& r) {
  return transact(Lock::write, [&] {
    auto now = now_epoch_ms();
    auto target = r.resolution == Resolution::approve  ? EscalationState::approved
                  : r.resolution == Resolution::deny   ? EscalationState::denied
                                                       : EscalationState::completed;
    int changed = Statement(db_, "UPDATE escalations SET state = ?, receipt = ?, note = ?, "
                                 "resolved_at = ?, resolved_by = 'operator' WHERE id = ? AND state = 'open'")
                      .bind(1, to_string(target))
                      .bind(2, r.receipt)
                      .bind(3, r.note)
                      .bind(4, now)
                      .bind(5, r.escalation_id)
                      .run();
    auto escalation = load_escalation(r.escalation_id);
    if (changed == 0) throw Abort{errc::illegal_transition};
    if (escalation.intent_id && r.resolution != Resolution::approve) {
      bool complete = r.resolution == Resolution::complete;
      int settled =
          Statement(db_, sql("UPDATE intents SET state = ?, receipt = CASE WHEN ? = '' THEN "
                             "receipt ELSE ? END, unknown_since = NULL, updated_at = ? "
                             "WHERE id = ? AND ",
                             sql_state_guard(resolution_sources(r.resolution))))
              .bind(1, to_string(complete ? IntentState::completed : IntentState::denied))
              .bind(2, r.receipt)
              .bind(3, r.receipt)
              .bind(4, now)
              .bind(5, *escalation.intent_id)
              .run();
      if (settled == 0) throw Abort{errc::illegal_transition};
    }
    return escalation;
  });
}

Result<void> SqliteStore::record_refusal(std::int64_t intent_id, const std::string& reason_code) {
  return transact(Lock::write, [&] {
    int inserted =
        Statement(db_, "INSERT INTO refusals (intent_id, run_id, tool, fingerprint, reason_code, "
                       "created_at) SELECT id, run_id, tool, fingerprint, ?, ? FROM intents "
                       "WHERE id = ?")
            .bind(1, reason_code)
            .bind(2, now_epoch_ms())
            .bind(3, intent_id)
            .run();
    if (inserted == 0) throw Abort{errc::not_found};
  });
}

Result<Signals> SqliteStore::read_signals(TimePoint since) {
  return transact(Lock::read, [&] {
    // The views' hours are "YYYY-MM-DDTHH:00:00Z" text: compared as text.
    Statement hour_of(db_, "SELECT strftime('%Y-%m-%dT%H:00:00Z', ? / 1000, 'unixepoch')");
    hour_of.bind(1, std::int64_t{since.time_since_epoch().count()});
    hour_of.step();
    std::string const from = hour_of.text(0);
    Signals out;
    Statement open(db_, "SELECT reason_code, count(*) FROM escalations WHERE state = 'open' "
                        "GROUP BY reason_code ORDER BY reason_code");
    while (open.step()) out.open_escalations.push_back({open.text(0), open.int64(1)});
    Statement hourly(db_, "SELECT hour, reason_code, escalations FROM dash_escalations_by_reason_hourly "
                          "WHERE hour >= ? ORDER BY hour, reason_code");
    hourly.bind(1, from);
    while (hourly.step()) out.escalations_by_hour.push_back({hourly.text(0), hourly.text(1), hourly.int64(2)});
    Statement depth(db_, "SELECT tool, depth, intents FROM dash_retry_depth ORDER BY tool, depth");
    while (depth.step())
      out.retry_depth.push_back({depth.text(0), static_cast<int>(depth.int64(1)), depth.int64(2)});
    Statement refusals(db_, "SELECT hour, tool, reason_code, refusals, fingerprints "
                            "FROM dash_same_fingerprint_refusals WHERE hour >= ? ORDER BY hour, tool, reason_code");
    refusals.bind(1, from);
    while (refusals.step())
      out.refusals_by_hour.push_back(
          {refusals.text(0), refusals.text(1), refusals.text(2), refusals.int64(3), refusals.int64(4)});
    Statement unknown(db_, "SELECT count(*) FROM dash_unknown_past_ttl");
    unknown.step();
    out.unknown_past_ttl = unknown.int64(0);
    Statement duplicates(db_, "SELECT count(*) FROM dash_duplicate_receipts");
    duplicates.step();
    out.duplicate_receipts = duplicates.int64(0);
    return out;
  });
}

// What is in flight is found through its attempts (attempts_lease): an
// intent is dispatched exactly while its current attempt is.
Result<int> SqliteStore::recover_expired() {
  return transact(Lock::write, [&] {
    auto now = now_epoch_ms();
    int intents = Statement(db_, "UPDATE intents SET state = 'unknown', recovered = 1, "
                                 "unknown_since = coalesce(unknown_since, ?1), updated_at = ?1, "
                                 "lease_until = NULL WHERE id IN (SELECT intent_id FROM attempts WHERE "
                                 "state = 'dispatched' AND lease_until < ?1) AND state = 'dispatched' "
                                 "AND lease_until < ?1")
                      .bind(1, now)
                      .run();
    Statement(db_, "UPDATE attempts SET state = 'unknown', recovered = 1, finished_at = ?1 "
                   "WHERE state = 'dispatched' AND lease_until < ?1")
        .bind(1, now)
        .run();
    return intents;
  });
}

}  // namespace idemgate::ledger
