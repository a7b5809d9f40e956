// The PostgreSQL backend (see pg_store.hpp). Values are inlined with
// pqxx's quote()/quote_raw() (libpq escaping), except in the hottest
// statements (a lone admission, a batch's reservations and its outcomes),
// which are prepared once per connection and take their rows as array
// parameters. Every method body runs either as its own transaction or,
// inside batch(), between SAVEPOINT and RELEASE (ROLLBACK TO on error) of
// the batch's one transaction.
#include "ledger/pg_store.hpp"

#include "ledger/migrations.hpp"
#include "ledger/store_support.hpp"
#include "ledger/transitions.hpp"

#include <pqxx/pqxx>

#include <poll.h>

#include <algorithm>
#include <map>
#include <set>
#include <numeric>

namespace idemgate::ledger {

using namespace detail;
using boost::system::error_code;

namespace {

#define IDEMGATE_MS(column) "(extract(epoch from " column ") * 1000)::bigint"
constexpr std::string_view intent_columns =
    "id, run_id, tool, scope, fingerprint, idem_key, state, answer_class, attempts, status, "
    "receipt, response_status, response_headers, response_body, response_truncated::int, "
    "request_snapshot, window_ms, unknown_ttl_ms, recovered::int, " IDEMGATE_MS("created_at") ", "
    IDEMGATE_MS("updated_at") ", " IDEMGATE_MS("window_until") ", " IDEMGATE_MS("unknown_since")
    ", " IDEMGATE_MS("retry_not_before") ", " IDEMGATE_MS("lease_until") ", waived, " IDEMGATE_MS("looked_up_at");
constexpr std::string_view escalation_columns =
    "id, run_id, intent_id, reason_code, package, state, receipt, note, "
    IDEMGATE_MS("created_at") ", " IDEMGATE_MS("resolved_at") ", resolved_by";
#undef IDEMGATE_MS

// Holds its row by value: rows[0] is a temporary (a row is a handle on the
// result, cheap to copy), and a reference to it dangles at the semicolon.
class PgRow final : public RowView {
 public:
  explicit PgRow(pqxx::row row) : row_(std::move(row)) {}
  bool is_null(int c) const override { return row_[c].is_null(); }
  std::int64_t int64(int c) const override { return row_[c].as<long long>(0); }
  std::optional<std::int64_t> optional_int64(int c) const override {
    if (is_null(c)) return std::nullopt;
    return int64(c);
  }
  std::string text(int c) const override {
    return is_null(c) ? std::string() : std::string(row_[c].c_str(), row_[c].size());
  }
  std::string blob(int c) const override {
    return is_null(c) ? std::string() : pqxx::binarystring(row_[c]).str();
  }

 private:
  pqxx::row row_;
};

std::string q(pqxx::transaction_base& w, std::string_view text) { return w.quote(std::string(text)); }
std::string q(pqxx::transaction_base&, std::int64_t value) { return std::to_string(value); }
std::string q(pqxx::transaction_base&, std::optional<std::int64_t> value) {
  return value ? std::to_string(*value) : "NULL";
}
std::string q_bytes(pqxx::transaction_base& w, std::string_view bytes) {
  return w.quote_raw(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}
std::string q_millis(Millis ms) { return "(" + std::to_string(ms.count()) + " * interval '1 millisecond')"; }

std::string select_intents(std::string_view where) {
  std::string s = "SELECT ";
  s += intent_columns;
  s += " FROM intents WHERE ";
  s += where;
  return s;
}

Intent load_intent(pqxx::transaction_base& w, std::int64_t id) {
  auto rows = w.exec(select_intents("id = " + std::to_string(id)));
  if (rows.empty()) throw Abort{errc::not_found};
  return read_intent(PgRow(rows[0]));
}

std::optional<Run> load_run(pqxx::transaction_base& w, const std::string& run) {
  auto rows = w.exec("SELECT run_id, state, calls, budget, reason FROM runs WHERE run_id = " +
                     q(w, run));
  if (rows.empty()) return std::nullopt;
  PgRow r(rows[0]);
  return Run{r.text(0), parse_run_state(r.text(1)).value_or(RunState::killed), r.int64(2),
             r.int64(3), r.text(4)};
}

Escalation load_escalation(pqxx::transaction_base& w, std::int64_t id) {
  auto rows = w.exec("SELECT " + std::string(escalation_columns) +
                     " FROM escalations WHERE id = " + std::to_string(id));
  if (rows.empty()) throw Abort{errc::not_found};
  return read_escalation(PgRow(rows[0]));
}

// Connection failures and server shutdowns drop the connection; the rest
// keep it.
bool is_connection_state(const std::string& sqlstate) {
  return sqlstate.starts_with("08") || sqlstate == "57P01" || sqlstate == "57P02" ||
         sqlstate == "57P03";
}

// libpq options bounding a silent peer, unless the URL sets them itself.
std::string with_bounds(std::string url) {
  for (const char* option : {"connect_timeout=5", "keepalives=1", "keepalives_idle=10",
                             "keepalives_interval=5", "keepalives_count=3",
                             "tcp_user_timeout=30000"}) {
    std::string_view name(option, std::string_view(option).find('='));
    if (url.find(std::string(name) + "=") != std::string::npos) continue;
    url += url.find('?') == std::string::npos ? '?' : '&';
    url += option;
  }
  return url;
}

// Store::admit_alone as one statement: the run's charge, the reservation
// and, when $7 and the charge counted, its first attempt. $1 run, $2 budget,
// $3 tool, $4 scope, $5 fingerprint, $6 key, $7 begin the attempt, $8 lease
// ms, $9 request snapshot, $10 window ms, $11 unknown ttl ms, $12 replica.
std::string admit_alone_sql() {
  return "WITH charge AS (INSERT INTO runs (run_id, budget, calls) VALUES ($1::text, $2::bigint, 1) "
         "ON CONFLICT (run_id) DO UPDATE SET calls = runs.calls + 1, updated_at = now() "
         "WHERE runs.calls < runs.budget AND runs.state = 'active' RETURNING calls, budget), "
         "g AS (SELECT $7::boolean AND EXISTS (SELECT 1 FROM charge) AS go), "
         "ins AS (INSERT INTO intents (run_id, tool, scope, fingerprint, idem_key, state, attempts, lease_until, "
         "request_snapshot, window_ms, unknown_ttl_ms, window_until) SELECT $1::text, $3::text, $4::text, $5::text, "
         "$6::text, CASE WHEN g.go THEN 'dispatched' ELSE 'reserved' END, CASE WHEN g.go THEN 1 ELSE 0 END, "
         "CASE WHEN g.go THEN now() + $8::bigint * interval '1 millisecond' ELSE NULL END, $9::text, $10::bigint, "
         "$11::bigint, now() + $10::bigint * interval '1 millisecond' FROM g "
         "ON CONFLICT (scope, fingerprint) WHERE NOT superseded DO NOTHING RETURNING *), "
         "att AS (INSERT INTO attempts (intent_id, number, replica_id, state, lease_until) "
         "SELECT id, 1, $12::text, 'dispatched', lease_until FROM ins WHERE state = 'dispatched') "
         "SELECT " + std::string(intent_columns) + ", charge.calls AS charged_calls, charge.budget AS charged_budget "
         "FROM (SELECT 1) AS one LEFT JOIN ins ON true LEFT JOIN charge ON true";
}

// One parameter of a prepared statement that carries a column of many rows:
// a PostgreSQL array literal, each element double-quoted with \ and "
// escaped (NULL unquoted). With unnest() in the statement, a batch of any
// size runs one plan, made once per connection.
class ArrayParam {
 public:
  ArrayParam& text(std::string_view value) {
    next();
    text_ += '"';
    for (char ch : value) {
      if (ch == '"' || ch == '\\') text_ += '\\';
      text_ += ch;
    }
    text_ += '"';
    return *this;
  }
  // bytea in its hex input form (\x...), as an element.
  ArrayParam& bytes(std::string_view value) {
    static constexpr char hex[] = "0123456789abcdef";
    next();
    text_ += "\"\\\\x";
    for (unsigned char ch : value) {
      text_ += hex[ch >> 4];
      text_ += hex[ch & 15];
    }
    text_ += '"';
    return *this;
  }
  ArrayParam& number(std::int64_t value) {
    next();
    text_ += std::to_string(value);
    return *this;
  }
  ArrayParam& flag(bool value) {
    next();
    text_ += value ? 't' : 'f';
    return *this;
  }
  ArrayParam& null() {
    next();
    text_ += "NULL";
    return *this;
  }
  template <class T>
  ArrayParam& number_or_null(const std::optional<T>& value) {
    return value ? number(static_cast<std::int64_t>(*value)) : null();
  }
  std::string str() const { return text_ + "}"; }

 private:
  void next() { text_ += text_.size() == 1 ? "" : ","; }
  std::string text_ = "{";
};

// Store::record_outcomes for one round (an intent once): the intents'
// compare-and-set, their attempts and their escalations (data-modifying
// CTEs, one snapshot), the intents as they are now read back from it. The
// parameters are columns (ArrayParam), $15 the states an outcome may settle
// from, comma-separated.
std::string record_outcomes_sql() {
  return "WITH v AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[], $5::bigint[], "
         "$6::int[], $7::text[], $8::boolean[], $9::int[], $10::text[], $11::bytea[], $12::boolean[], $13::int[], "
         "$14::text[], $15::text[], $16::text[]) AS v(o_id, o_state, o_class, o_status, o_retry_ms, o_waive, "
         "o_receipt, o_has_response, o_response_status, o_response_headers, o_response_body, o_response_truncated, "
         "o_attempt, o_attempt_state, o_sources, o_note)), "
         "u AS (UPDATE intents SET state = v.o_state, answer_class = v.o_class, status = v.o_status, "
         "updated_at = now(), unknown_since = CASE WHEN v.o_state = 'unknown' THEN "
         "coalesce(intents.unknown_since, now()) ELSE NULL END, "
         "retry_not_before = now() + v.o_retry_ms * interval '1 millisecond', lease_until = NULL, "
         "waived = intents.waived + v.o_waive, "
         "receipt = CASE WHEN v.o_receipt = '' THEN intents.receipt ELSE v.o_receipt END, "
         "response_status = CASE WHEN v.o_has_response THEN v.o_response_status ELSE intents.response_status END, "
         "response_headers = CASE WHEN v.o_has_response THEN v.o_response_headers ELSE intents.response_headers END, "
         "response_body = CASE WHEN v.o_has_response THEN v.o_response_body ELSE intents.response_body END, "
         "response_truncated = CASE WHEN v.o_has_response THEN v.o_response_truncated "
         "ELSE intents.response_truncated END "
         "FROM v WHERE intents.id = v.o_id AND intents.state = ANY (string_to_array(v.o_sources, ',')) "
         "AND (v.o_attempt = 0 OR intents.attempts = v.o_attempt) RETURNING intents.*), "
         "a AS (UPDATE attempts SET state = v.o_attempt_state, answer_class = v.o_class, status = v.o_status, "
         "receipt = v.o_receipt, finished_at = now() FROM u JOIN v ON v.o_id = u.id WHERE v.o_attempt > 0 "
         "AND attempts.intent_id = u.id AND attempts.number = v.o_attempt "
         "AND attempts.state IN ('dispatched', 'unknown')), "
         "e AS (UPDATE escalations SET state = 'completed', resolved_by = 'idemgate', receipt = v.o_receipt, "
         "note = v.o_note, resolved_at = now() FROM u JOIN v ON v.o_id = u.id WHERE v.o_state <> 'unknown' "
         "AND escalations.intent_id = u.id AND escalations.state = 'open' "
         "AND escalations.reason_code IN ('money_unknown', 'tool_outcome_unknown')) "
         "SELECT " + std::string(intent_columns) + " FROM u";
}

// Store::reserve_intents' insert: the rows (ArrayParam columns, in lock
// order) that get in, each with attempt 1 begun when its $9 is set (lease
// $10 ms, replica $11), come back whole; the others conflict.
std::string reserve_intents_sql() {
  return "WITH ins AS (INSERT INTO intents (run_id, tool, scope, fingerprint, idem_key, state, attempts, lease_until, "
         "request_snapshot, window_ms, unknown_ttl_ms, window_until) "
         "SELECT r.run, r.tool, r.scope, r.fingerprint, r.idem_key, "
         "CASE WHEN r.start THEN 'dispatched' ELSE 'reserved' END, CASE WHEN r.start THEN 1 ELSE 0 END, "
         "CASE WHEN r.start THEN now() + r.lease_ms * interval '1 millisecond' END, r.snapshot, r.window_ms, "
         "r.ttl_ms, now() + r.window_ms * interval '1 millisecond' "
         "FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], "
         "$8::bigint[], $9::boolean[], $10::bigint[]) AS r(run, tool, scope, fingerprint, idem_key, snapshot, "
         "window_ms, ttl_ms, start, lease_ms) "
         "ON CONFLICT (scope, fingerprint) WHERE NOT superseded DO NOTHING RETURNING *), "
         "att AS (INSERT INTO attempts (intent_id, number, replica_id, state, lease_until) "
         "SELECT id, 1, $11::text, 'dispatched', lease_until FROM ins WHERE state = 'dispatched') "
         "SELECT " + std::string(intent_columns) + " FROM ins";
}

// An idle connection has nothing to read: if its socket is readable (or hung
// up), the server ended the session (restart, admin shutdown, idle timeout).
// Checking before use turns a restart into a reconnect instead of a failed
// call, and keeps libpqxx away from the dead connection.
bool ended_by_server(int socket) {
  if (socket < 0) return true;
  pollfd p{socket, POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;
}

}  // namespace

struct PgStore::Connection {
  explicit Connection(const std::string& url) : c(url) {}
  pqxx::connection c;
};

PgStore::PgStore(std::string url, Millis statement_timeout)
    : url_(with_bounds(std::move(url))), statement_timeout_(statement_timeout) {}

PgStore::~PgStore() = default;

void PgStore::drop_connection() { connection_.reset(); }

error_code PgStore::connect() {
  if (connection_ && connection_->c.is_open() && !ended_by_server(connection_->c.sock())) return {};
  connection_.reset();
  auto now = std::chrono::steady_clock::now();
  if (now < next_connect_) return errc::unavailable;
  try {
    auto c = std::make_unique<Connection>(url_);
    pqxx::nontransaction setup(c->c);
    auto ms = std::to_string(statement_timeout_.count());
    // A blocking statement is bounded here, not by the caller: the worker
    // thread gets its answer (or 57014) within statement_timeout.
    setup.exec("SET statement_timeout = " + ms + "; SET lock_timeout = " + ms +
               "; SET idle_in_transaction_session_timeout = " + ms +
               "; SET synchronous_commit = on");
    setup.commit();
    // admit_alone's statement, planned once per connection (its plan is
    // most of its server time at one connection).
    c->c.prepare("admit_alone", admit_alone_sql());
    c->c.prepare("record_outcomes", record_outcomes_sql());
    c->c.prepare("reserve_intents", reserve_intents_sql());
    // Store::count_calls: the runs created, locked once each in id order,
    // then counted ($1 run ids, $2 budgets or counts).
    c->c.prepare("runs_create", "INSERT INTO runs (run_id, budget) SELECT * FROM unnest($1::text[], $2::bigint[]) "
                                "ON CONFLICT (run_id) DO NOTHING");
    c->c.prepare("runs_lock", "SELECT run_id, state, calls, budget, reason FROM runs WHERE run_id = ANY ($1::text[]) "
                              "ORDER BY run_id FOR UPDATE");
    c->c.prepare("runs_add", "UPDATE runs SET calls = calls + v.n, updated_at = now() "
                             "FROM unnest($1::text[], $2::bigint[]) AS v(id, n) WHERE runs.run_id = v.id");
    connection_ = std::move(c);
    backoff_ = Millis(0);
    return {};
  } catch (const std::exception&) {
    backoff_ = std::clamp(backoff_ * 2, Millis(50), Millis(2000));
    next_connect_ = now + backoff_;
    return errc::unavailable;
  }
}

struct PgStore::OpenBatch {
  OpenBatch(pqxx::connection& c, Calls calls) : w(c), together(calls == Calls::together) {}
  pqxx::work w;
  bool together;     // no savepoints: the first failing call fails the batch
  error_code error;  // set when the transaction itself failed
};

namespace {

// A subtransaction whose SAVEPOINT is sent at once. libpqxx 6.4 sends it
// lazily, on the first exec(), but not on exec_prepared() or exec_params():
// a prepared statement first in a subtransaction ran in the batch's own
// transaction, and its failure aborted the batch (25P02 for every call after
// it) instead of rolling back to a savepoint that was never made.
class Savepoint final : public pqxx::subtransaction {
 public:
  Savepoint(pqxx::dbtransaction& parent, const std::string& name)
      : pqxx::internal::namedclass("subtransaction", name), pqxx::subtransaction(parent, name) {
    Begin();
  }
};

}  // namespace

template <class T, class F>
Result<T> PgStore::in_savepoint(F& body) {
  auto& b = *batch_;
  if (b.error) return Result<T>(b.error);
  auto fail_batch = [&](error_code why) {
    b.error = why;
    return Result<T>(b.error);
  };
  for (int attempt = 0;; ++attempt) {
    // Between statements the socket has nothing to read unless the server
    // ended the session: fail the batch without sending on a dead connection.
    if (ended_by_server(connection_->c.sock())) return fail_batch(errc::unavailable);
    error_code error;
    try {
      if (b.together) {
        // One caller's calls: a savepoint is two round trips for nothing,
        // since any failure fails that caller (below: the batch rolls back).
        if constexpr (std::is_void_v<T>) {
          body(b.w);
          return Result<T>();
        } else {
          return Result<T>(body(b.w));
        }
      }
      // SAVEPOINT; RELEASE on commit(); ROLLBACK TO on an error (libpqxx
      // rolls back the transaction a failed statement ran in: here only the
      // subtransaction, the batch goes on).
      Savepoint sub(b.w, "job");
      if constexpr (std::is_void_v<T>) {
        body(sub);
        sub.commit();
        return Result<T>();
      } else {
        T value = body(sub);
        sub.commit();
        return Result<T>(std::move(value));
      }
    } catch (const Abort& a) {
      error = a.code;
    } catch (const pqxx::broken_connection&) {
      return fail_batch(errc::unavailable);
    } catch (const pqxx::in_doubt_error&) {
      return fail_batch(errc::unavailable);
    } catch (const pqxx::transaction_rollback&) {
      // Deadlock or serialisation failure: rolling back to the savepoint
      // released this call's locks; run it again, a bounded number of times.
      if (!b.together && attempt < 3) continue;
      error = errc::conflict;
    } catch (const pqxx::sql_error& e) {
      if (is_connection_state(e.sqlstate())) return fail_batch(errc::unavailable);
      // The batch's transaction is aborted (a savepoint was not rolled back).
      if (e.sqlstate() == "25P02") return fail_batch(errc::storage_failure);
      error = e.sqlstate() == "57014" || e.sqlstate() == "55P03" ? errc::busy
                                                                  : errc::storage_failure;
    } catch (const std::exception&) {
      error = errc::storage_failure;
    }
    // Without a savepoint what the call did cannot be undone alone: nothing
    // of the batch is written.
    if (b.together) return fail_batch(error);
    return Result<T>(error);
  }
}

error_code PgStore::batch(const std::function<void()>& body, Calls calls, Durability durability) {
  if (batch_) return errc::invalid_argument;
  if (auto ec = connect()) return ec;
  error_code error;
  try {
    OpenBatch open(connection_->c, calls);
    // The commit then waits for no WAL flush (the WAL writer flushes it
    // within a few wal_writer_delay): the disk's wait leaves this lane.
    if (durability == Durability::deferred) open.w.exec("SET LOCAL synchronous_commit = off");
    batch_ = &open;
    try {
      body();
    } catch (const std::exception&) {
      if (!open.error) open.error = errc::storage_failure;
    }
    batch_ = nullptr;
    if (!open.error && ended_by_server(connection_->c.sock())) open.error = errc::unavailable;
    if (!open.error) {
      open.w.commit();
      return {};
    }
    error = open.error;  // the work rolls back as it goes...
    // ...unless the connection is dead: then nothing is sent (libpqxx 6.4
    // leaks the result of a statement sent on a dead connection).
    if (error == errc::unavailable) connection_->c.disconnect();
  } catch (const pqxx::broken_connection&) {
    error = errc::unavailable;
  } catch (const pqxx::in_doubt_error&) {
    error = errc::unavailable;  // the caller fails closed; its retry finds what committed
  } catch (const pqxx::transaction_rollback&) {
    error = errc::conflict;
  } catch (const pqxx::sql_error& e) {
    error = is_connection_state(e.sqlstate()) ? errc::unavailable : errc::storage_failure;
  } catch (const std::exception&) {
    error = errc::storage_failure;
  }
  batch_ = nullptr;
  if (error == errc::unavailable || error == errc::storage_failure) drop_connection();
  return error;
}

template <class F>
auto PgStore::transact(F&& body, Commit commit) {
  using T = std::invoke_result_t<F&, pqxx::transaction_base&>;
  if (batch_) return in_savepoint<T>(body);
  auto run = [&](auto&& w) -> Result<T> {
    if constexpr (std::is_void_v<T>) {
      body(w);
      w.commit();
      return Result<T>();
    } else {
      T value = body(w);
      w.commit();
      return Result<T>(std::move(value));
    }
  };
  // Deadlocks and serialisation failures roll back with nothing written:
  // the transaction is simply run again, a bounded number of times.
  for (int attempt = 0;; ++attempt) {
    if (auto ec = connect()) return Result<T>(ec);
    try {
      if (commit == Commit::one_statement) return run(pqxx::nontransaction(connection_->c));
      return run(pqxx::work(connection_->c));
    } catch (const Abort& a) {
      return Result<T>(error_code(a.code));
    } catch (const pqxx::broken_connection&) {
      drop_connection();
      return Result<T>(error_code(errc::unavailable));
    } catch (const pqxx::in_doubt_error&) {
      // The commit's fate is unknown: the caller fails closed and its retry
      // finds whatever did get committed.
      drop_connection();
      return Result<T>(error_code(errc::unavailable));
    } catch (const pqxx::transaction_rollback&) {
      if (attempt < 3) continue;
      return Result<T>(error_code(errc::conflict));
    } catch (const pqxx::sql_error& e) {
      if (is_connection_state(e.sqlstate())) {
        drop_connection();
        return Result<T>(error_code(errc::unavailable));
      }
      if (e.sqlstate() == "57014" || e.sqlstate() == "55P03")
        return Result<T>(error_code(errc::busy));
      return Result<T>(error_code(errc::storage_failure));
    } catch (const std::exception&) {
      drop_connection();
      return Result<T>(error_code(errc::storage_failure));
    }
  }
}

Result<int> PgStore::migrate() {
  return transact([&](pqxx::transaction_base& w) {
    // Replicas starting together migrate one at a time. A script may take
    // longer than ledger.statement_timeout (an index build on a big ledger),
    // which bounds request-path statements, not this; lock_timeout still
    // bounds waiting behind traffic (a failed start is retried).
    w.exec("SET LOCAL statement_timeout = 0; SELECT pg_advisory_xact_lock(7202415001)");
    w.exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
           "name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())");
    int version = w.exec("SELECT coalesce(max(version), 0) FROM schema_version")[0][0].as<int>();
    auto migrations = postgresql_migrations();
    if (version > latest_version(migrations)) throw Abort{errc::newer_schema};
    for (const auto& m : migrations) {
      if (m.version <= version) continue;
      w.exec(std::string(m.sql));
      w.exec("INSERT INTO schema_version (version, name) VALUES (" + std::to_string(m.version) +
             ", " + q(w, m.name) + ")");
      version = m.version;
    }
    return version;
  });
}

std::vector<Result<Reservation>> PgStore::reserve_intents(std::span<const ReserveRequest> requests) {
  std::vector<Result<Reservation>> results(requests.size(), error_code(errc::invalid_argument));
  auto batch = transact([&](pqxx::transaction_base& w) {
    std::vector<Result<Reservation>> done = results;
    // Valid requests in (scope, fingerprint) order: concurrent batches then
    // take the unique-index locks in the same order and cannot deadlock.
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < requests.size(); ++i)
      if (valid(requests[i])) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](auto a, auto b) {
      return std::tie(requests[a].scope, requests[a].fingerprint) <
             std::tie(requests[b].scope, requests[b].fingerprint);
    });
    if (order.empty()) return done;

    auto bound_keys = [&] {
      std::map<std::pair<std::string, std::string>, std::pair<std::string, std::int64_t>> bound;
      std::string list;
      for (auto i : order)
        if (!requests[i].agent_key.empty())
          list += (list.empty() ? "(" : ",(") + q(w, requests[i].scope) + "," +
                  q(w, requests[i].agent_key) + ")";
      if (list.empty()) return bound;
      for (const auto& row : w.exec("SELECT scope, agent_key, fingerprint, intent_id FROM "
                                    "agent_keys WHERE (scope, agent_key) IN (" + list + ")")) {
        PgRow r(row);
        bound[{r.text(0), r.text(1)}] = {r.text(2), r.int64(3)};
      }
      return bound;
    };
    auto mismatch = [&](const auto& bound, std::size_t i) -> std::optional<std::int64_t> {
      const auto& r = requests[i];
      if (r.agent_key.empty()) return std::nullopt;
      auto it = bound.find({r.scope, r.agent_key});
      if (it == bound.end() || it->second.first == r.fingerprint) return std::nullopt;
      return it->second.second;
    };

    auto before = bound_keys();
    std::vector<std::size_t> live;
    for (auto i : order) {
      if (auto other = mismatch(before, i)) {
        done[i] = Reservation{ReserveOutcome::key_mismatch, load_intent(w, *other)};
        continue;
      }
      live.push_back(i);
    }
    if (live.empty()) return done;
    auto pair_of = [&](std::size_t i) { return "(" + q(w, requests[i].scope) + "," + q(w, requests[i].fingerprint) + ")"; };
    auto join = [&](const std::vector<std::size_t>& which, auto&& item) {
      std::string list;
      for (auto i : which) list += (list.empty() ? "" : ",") + item(i);
      return list;
    };
    // Group commit: one statement, one durable commit, many reservations.
    // Exactly one row per scope+fingerprint gets in; the others conflict.
    // The rows that got in come back whole: no read-back for them.
    std::map<std::pair<std::string, std::string>, Intent> rows;
    std::set<std::int64_t> inserted;
    // Requests with a start are inserted with attempt 1 begun, and their
    // attempts rows written by the same statement (all of one replica).
    std::string replica;
    for (auto i : live)
      if (requests[i].start) {
        if (!replica.empty() && replica != requests[i].start->replica) throw Abort{errc::invalid_argument};
        replica = requests[i].start->replica;
      }
    auto insert = [&](const std::vector<std::size_t>& which) {
      ArrayParam run, tool, scope, fingerprint, key, snapshot, window_ms, ttl_ms, start, lease_ms;
      for (auto i : which) {
        const auto& r = requests[i];
        run.text(r.run);
        tool.text(r.tool);
        scope.text(r.scope);
        fingerprint.text(r.fingerprint);
        key.text(r.key);
        snapshot.text(r.request_snapshot);
        window_ms.number(r.window.count());
        ttl_ms.number(r.unknown_ttl.count());
        start.flag(r.start.has_value());
        lease_ms.number(r.start ? r.start->lease.count() : 0);
      }
      for (const auto& row : w.exec_prepared("reserve_intents", run.str(), tool.str(), scope.str(), fingerprint.str(),
                                             key.str(), snapshot.str(), window_ms.str(), ttl_ms.str(), start.str(),
                                             lease_ms.str(), replica)) {
        auto intent = read_intent(PgRow(row));
        inserted.insert(intent.id);
        auto key = std::pair{intent.scope, intent.fingerprint};
        rows[key] = std::move(intent);
      }
    };
    auto conflicted = [&] {
      std::vector<std::size_t> rest;
      std::set<std::pair<std::string, std::string>> listed;
      for (auto i : live)
        if (!rows.count({requests[i].scope, requests[i].fingerprint}) &&
            listed.insert({requests[i].scope, requests[i].fingerprint}).second)
          rest.push_back(i);
      return rest;
    };
    insert(live);
    if (auto rest = conflicted(); !rest.empty()) {
      // A live intent whose window has passed and that holds no unresolved
      // dispatch gives its fingerprint up to the new reservation.
      auto superseded = w.exec("UPDATE intents SET superseded = true WHERE NOT superseded AND window_until <= now() "
                               "AND " + sql_state_guard({IntentState::reserved, IntentState::completed,
                                                         IntentState::denied, IntentState::retryable}) +
                               " AND (scope, fingerprint) IN (" + join(rest, pair_of) + ")")
                            .affected_rows();
      if (superseded) insert(rest);
      if (auto existing = conflicted(); !existing.empty())
        for (const auto& row :
             w.exec(select_intents("NOT superseded AND (scope, fingerprint) IN (" + join(existing, pair_of) + ")"))) {
          auto intent = read_intent(PgRow(row));
          auto key = std::pair{intent.scope, intent.fingerprint};
          rows[key] = std::move(intent);
        }
    }
    std::string binds;
    for (auto i : live) {
      const auto& r = requests[i];
      auto found = rows.find({r.scope, r.fingerprint});
      if (found == rows.end()) throw Abort{errc::conflict};  // superseded concurrently
      auto& intent = found->second;
      // The winner is the request whose key the inserted row holds; a second
      // request of this batch for the same fingerprint is "existing".
      bool won = inserted.count(intent.id) && intent.key == r.key;
      if (won) inserted.erase(intent.id);
      done[i] = Reservation{won ? ReserveOutcome::reserved : ReserveOutcome::existing, intent,
                            won && r.start.has_value()};
      if (!r.agent_key.empty())
        binds += (binds.empty() ? "(" : ",(") + q(w, r.scope) + "," + q(w, r.agent_key) + "," +
                 q(w, r.fingerprint) + "," + std::to_string(intent.id) + ")";
    }
    if (!binds.empty()) {
      w.exec("INSERT INTO agent_keys (scope, agent_key, fingerprint, intent_id) VALUES " + binds +
             " ON CONFLICT DO NOTHING");
      // A concurrent transaction may have bound one of these keys to another
      // fingerprint first: that request is a mismatch after all.
      auto after = bound_keys();
      std::string unstart;
      for (auto i : live)
        if (auto other = mismatch(after, i)) {
          // Its row must not say an attempt began: nothing will be sent.
          if (done[i] && done[i]->started)
            unstart += (unstart.empty() ? "" : ",") + std::to_string(done[i]->intent.id);
          done[i] = Reservation{ReserveOutcome::key_mismatch, load_intent(w, *other)};
        }
      if (!unstart.empty()) {
        w.exec("DELETE FROM attempts WHERE number = 1 AND intent_id IN (" + unstart + ")");
        w.exec("UPDATE intents SET state = 'reserved', attempts = 0, lease_until = NULL WHERE id IN (" + unstart + ")");
      }
    }
    return done;
  });
  if (!batch) {
    for (auto& r : results) r = batch.error();
    return results;
  }
  return std::move(*batch);
}

Result<AttemptStart> PgStore::begin_attempt(const AttemptRequest& r, const std::string& replica) {
  return transact([&](pqxx::transaction_base& w) {
    auto id = std::to_string(r.intent_id);
    auto lease = "now() + " + q_millis(r.lease);
    // Compare-and-set: concurrent callers (any replica) serialise on the row
    // lock and re-check the guard against what their verdict was made from,
    // so one of them moves it to dispatched and the others decide again.
    auto changed = w.exec(
        "UPDATE intents SET state = 'dispatched', attempts = attempts + 1, updated_at = now(), "
        "lease_until = " + lease + " WHERE id = " + id + " AND state = " + q(w, to_string(r.expected_state)) +
        " AND attempts = " + std::to_string(r.expected_attempts) +
        " AND attempts - waived < " + std::to_string(r.max_attempts) +
        " AND (retry_not_before IS NULL OR retry_not_before <= now()) AND " +
        sql_state_guard(dispatchable_states()) + " RETURNING " + std::string(intent_columns));
    if (changed.empty()) {
      auto intent = load_intent(w, r.intent_id);
      auto why = refusal_reason(intent, r);
      return AttemptStart{why, 0, std::move(intent)};
    }
    auto intent = read_intent(PgRow(changed[0]));
    w.exec("INSERT INTO attempts (intent_id, number, replica_id, state, lease_until) VALUES (" + id + ", " +
           std::to_string(intent.attempts) + ", " + q(w, replica) + ", 'dispatched', " + lease + ")");
    int number = intent.attempts;
    return AttemptStart{AttemptOutcome::started, number, std::move(intent)};
  });
}

std::vector<Result<AttemptStart>> PgStore::begin_attempts(std::span<const AttemptRequest> requests,
                                                          const std::string& replica) {
  if (requests.size() == 1) return {begin_attempt(requests.front(), replica)};
  std::vector<Result<AttemptStart>> results(requests.size(), error_code(errc::invalid_argument));
  auto batch = transact([&](pqxx::transaction_base& w) {
    // begin_attempt's compare-and-set for many intents: one UPDATE, one
    // INSERT of the attempts, one read back, whatever the count.
    std::string values, ids;
    for (const auto& r : requests) {
      values += (values.empty() ? "(" : ",(") + std::to_string(r.intent_id) + "::bigint," +
                q(w, to_string(r.expected_state)) + "," + std::to_string(r.expected_attempts) + "," +
                std::to_string(r.max_attempts) + "," + std::to_string(r.lease.count()) + "::bigint)";
      ids += (ids.empty() ? "" : ",") + std::to_string(r.intent_id);
    }
    std::map<std::int64_t, int> started;
    std::map<std::int64_t, Intent> now;
    for (const auto& row : w.exec(
             "WITH v(id, expected_state, expected_attempts, max_attempts, lease_ms) AS (VALUES " + values +
             "), begun AS (UPDATE intents SET state = 'dispatched', attempts = intents.attempts + 1, "
             "updated_at = now(), lease_until = now() + v.lease_ms * interval '1 millisecond' FROM v "
             "WHERE intents.id = v.id AND intents.state = v.expected_state AND intents.attempts = v.expected_attempts "
             "AND intents.attempts - intents.waived < v.max_attempts AND (intents.retry_not_before IS NULL OR "
             "intents.retry_not_before <= now()) AND " + sql_state_guard(dispatchable_states(), "intents.state") +
             " RETURNING intents.*), "
             "recorded AS (INSERT INTO attempts (intent_id, number, replica_id, state, lease_until) "
             "SELECT id, attempts, " + q(w, replica) + ", 'dispatched', lease_until FROM begun) "
             "SELECT " + std::string(intent_columns) + " FROM begun")) {
      auto intent = read_intent(PgRow(row));
      started[intent.id] = intent.attempts;
      now[intent.id] = std::move(intent);
    }
    // The refused ones as they are now (what they were refused for).
    std::string refused;
    for (const auto& r : requests)
      if (!started.count(r.intent_id)) refused += (refused.empty() ? "" : ",") + std::to_string(r.intent_id);
    if (!refused.empty())
      for (const auto& row : w.exec(select_intents("id IN (" + refused + ")"))) {
        auto intent = read_intent(PgRow(row));
        now[intent.id] = std::move(intent);
      }
    std::vector<Result<AttemptStart>> done;
    for (const auto& r : requests) {
      auto found = now.find(r.intent_id);
      if (found == now.end()) {
        done.emplace_back(error_code(errc::not_found));
        continue;
      }
      auto s = started.find(r.intent_id);
      if (s != started.end())
        done.emplace_back(AttemptStart{AttemptOutcome::started, s->second, found->second});
      else
        done.emplace_back(AttemptStart{refusal_reason(found->second, r), 0, found->second});
    }
    return done;
  });
  if (!batch) {
    for (auto& r : results) r = batch.error();
    return results;
  }
  return std::move(*batch);
}

// One outcome is a round of one: the same statement, so that the one-by-one
// and the batched forms cannot drift apart.
Result<Intent> PgStore::record_outcome(const Outcome& o) { return std::move(record_outcomes({&o, 1}).front()); }

std::vector<Result<Intent>> PgStore::record_outcomes(std::span<const Outcome> outcomes) {
  std::vector<Result<Intent>> results(outcomes.size(), error_code(errc::invalid_argument));
  // Rounds: round k holds the k-th outcome of each intent, so a statement
  // updates an intent once and an intent's outcomes apply in their order.
  std::vector<std::vector<std::size_t>> rounds;
  std::map<std::int64_t, std::size_t> seen;
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    auto k = seen[outcomes[i].intent_id]++;
    if (rounds.size() <= k) rounds.emplace_back();
    rounds[k].push_back(i);
  }
  for (auto& round : rounds) {
    // record_outcome for the whole round in one statement: the intents'
    // compare-and-set, their attempts and their escalations (data-modifying
    // CTEs, one snapshot), the intents as they are now read back from it.
    std::sort(round.begin(), round.end(),
              [&](auto a, auto b) { return outcomes[a].intent_id < outcomes[b].intent_id; });  // the lock order
    auto applied = transact([&](pqxx::transaction_base& w) {
      ArrayParam id, state, answer_class, status, retry_ms, waive, receipt, has_response, response_status,
          response_headers, response_body, response_truncated, attempt, attempt_state, sources, note;
      for (auto i : round) {
        const auto& o = outcomes[i];
        const auto* r = o.response ? &*o.response : nullptr;
        std::string from;
        for (auto s : settle_sources(o.state, o.attempt > 0)) {
          if (!from.empty()) from += ',';
          from += to_string(s);
        }
        id.number(o.intent_id);
        state.text(to_string(o.state));
        answer_class.text(o.answer_class);
        status.number_or_null(o.status);
        retry_ms.number_or_null(o.retry_after ? std::optional(o.retry_after->count()) : std::nullopt);
        waive.number(o.waive ? 1 : 0);
        receipt.text(o.receipt);
        has_response.flag(r != nullptr);
        r ? response_status.number(r->status) : response_status.null();
        r ? response_headers.text(encode_headers(r->headers)) : response_headers.null();
        r ? response_body.bytes(r->body) : response_body.null();
        response_truncated.flag(r && r->truncated);
        attempt.number(o.attempt);
        attempt_state.text(to_string(o.state == IntentState::unknown ? AttemptState::unknown : AttemptState::answered));
        sources.text(from);
        note.text("settled by reconciliation: " + o.answer_class);
      }
      auto const ids = id.str();
      // The rows locked in id order first: an UPDATE ... FROM locks them in
      // whatever order its plan visits them.
      if (round.size() > 1) w.exec_params("SELECT id FROM intents WHERE id = ANY ($1::bigint[]) ORDER BY id FOR UPDATE", ids);
      std::map<std::int64_t, Intent> settled;
      for (const auto& row :
           w.exec_prepared("record_outcomes", ids, state.str(), answer_class.str(), status.str(), retry_ms.str(),
                           waive.str(), receipt.str(), has_response.str(), response_status.str(),
                           response_headers.str(), response_body.str(), response_truncated.str(), attempt.str(),
                           attempt_state.str(), sources.str(), note.str())) {
        auto intent = read_intent(PgRow(row));
        settled[intent.id] = std::move(intent);
      }
      // The rest were refused: illegal_transition when the intent exists.
      std::set<std::int64_t> exists;
      if (settled.size() < round.size())
        for (const auto& row : w.exec_params("SELECT id FROM intents WHERE id = ANY ($1::bigint[])", ids))
          exists.insert(row[0].as<long long>());
      std::vector<Result<Intent>> done;
      for (auto i : round) {
        auto found = settled.find(outcomes[i].intent_id);
        if (found != settled.end()) {
          done.emplace_back(std::move(found->second));
          continue;
        }
        auto const why = exists.count(outcomes[i].intent_id) ? errc::illegal_transition : errc::not_found;
        // Alone, a refusal is the call's failure (a batch of one caller's
        // calls fails with it), as record_outcome's always was.
        if (round.size() == 1) throw Abort{why};
        done.emplace_back(error_code(why));
      }
      return done;
    });
    if (applied) {
      for (std::size_t k = 0; k < round.size(); ++k) results[round[k]] = std::move((*applied)[k]);
    } else if (round.size() > 1 && (!batch_ || !batch_->error) && applied.error() == errc::storage_failure) {
      // One bad row (a value the server refused) fails the statement: the
      // round's outcomes one by one, so only that one fails.
      for (auto i : round) results[i] = record_outcome(outcomes[i]);
    } else {
      for (auto i : round) results[i] = applied.error();
    }
  }
  return results;
}

Result<Intent> PgStore::find_intent(std::int64_t intent_id) {
  return transact([&](pqxx::transaction_base& w) { return load_intent(w, intent_id); });
}

Result<Intent> PgStore::find_intent_by_key(const std::string& key) {
  return transact([&](pqxx::transaction_base& w) {
    auto k = q(w, key);
    auto rows = w.exec(select_intents("idem_key = " + k +
                                      " OR id IN (SELECT intent_id FROM agent_keys WHERE "
                                      "agent_key = " + k + ") ORDER BY id DESC LIMIT 1"));
    if (rows.empty()) throw Abort{errc::not_found};
    return read_intent(PgRow(rows[0]));
  });
}

Result<std::vector<Intent>> PgStore::list_intents_by_run(const std::string& run, int limit) {
  return transact([&](pqxx::transaction_base& w) {
    std::vector<Intent> out;
    for (const auto& row : w.exec(select_intents("run_id = " + q(w, run) +
                                                 " ORDER BY id DESC LIMIT " +
                                                 std::to_string(limit))))
      out.push_back(read_intent(PgRow(row)));
    return out;
  });
}

Result<std::int64_t> PgStore::count_intents(const std::string& run, const std::string& tool,
                                            const std::string& answer_class,
                                            std::int64_t except_intent) {
  return transact([&](pqxx::transaction_base& w) {
    return w
        .exec("SELECT count(*) FROM intents WHERE run_id = " + q(w, run) + " AND tool = " +
              q(w, tool) + " AND answer_class = " + q(w, answer_class) +
              " AND id <> " + std::to_string(except_intent))[0][0]
        .as<std::int64_t>();
  });
}

Result<std::vector<Intent>> PgStore::list_unknown_past_ttl(int limit) {
  return transact([&](pqxx::transaction_base& w) {
    std::vector<Intent> out;
    for (const auto& row : w.exec(select_intents(
             "state = 'unknown' AND unknown_since + unknown_ttl_ms * interval '1 millisecond' "
             "<= now() ORDER BY unknown_since LIMIT " + std::to_string(limit))))
      out.push_back(read_intent(PgRow(row)));
    return out;
  });
}

Result<std::vector<Intent>> PgStore::list_unescalated_unknowns(int limit) {
  return transact([&](pqxx::transaction_base& w) {
    std::vector<Intent> out;
    for (const auto& row : w.exec(select_intents(
             "state = 'unknown' AND unknown_since + unknown_ttl_ms * interval '1 millisecond' "
             "<= now() AND NOT EXISTS (SELECT 1 FROM escalations e WHERE e.intent_id = intents.id "
             "AND e.reason_code IN ('money_unknown', 'tool_outcome_unknown')) "
             "ORDER BY unknown_since LIMIT " + std::to_string(limit))))
      out.push_back(read_intent(PgRow(row)));
    return out;
  });
}

Result<std::vector<Intent>> PgStore::claim_lookups(std::span<const LookupDue> due, int limit) {
  if (due.empty()) return std::vector<Intent>{};
  return transact([&](pqxx::transaction_base& w) {
    std::string which;
    for (auto const& d : due)
      which += (which.empty() ? "" : " OR ") + std::string("(tool = ") + q(w, d.tool) + " AND unknown_since + " +
               q_millis(d.after) + " <= now())";
    // SKIP LOCKED: two replicas' sweepers claim different intents, never one twice.
    std::vector<Intent> out;
    for (const auto& row : w.exec("UPDATE intents SET looked_up_at = now() WHERE id IN (SELECT id FROM intents "
                                  "WHERE state = 'unknown' AND looked_up_at IS NULL AND (" + which +
                                  ") ORDER BY unknown_since LIMIT " + std::to_string(limit) +
                                  " FOR UPDATE SKIP LOCKED) RETURNING " + std::string(intent_columns)))
      out.push_back(read_intent(PgRow(row)));
    std::sort(out.begin(), out.end(), [](const Intent& a, const Intent& b) { return a.unknown_since < b.unknown_since; });
    return out;
  });
}

Result<RunCharge> PgStore::count_call(const std::string& run, std::int64_t budget, CallKind kind) {
  return transact([&](pqxx::transaction_base& w) {
    auto id = q(w, run);
    auto open = std::string("runs.calls < runs.budget AND (runs.state = 'active'") +
                (kind == CallKind::read ? " OR runs.state = 'frozen')" : ")");
    if (budget > 0) {
      // One round trip when the call counts: a new run is created with this
      // call counted, a known one counted if it is open and under budget.
      auto counted = w.exec("INSERT INTO runs (run_id, budget, calls) VALUES (" + id + ", " + std::to_string(budget) +
                            ", 1) ON CONFLICT (run_id) DO UPDATE SET calls = runs.calls + 1, updated_at = now() "
                            "WHERE " + open + " RETURNING calls, budget");
      if (!counted.empty())
        return RunCharge{ChargeOutcome::counted, counted[0][0].as<long long>(), counted[0][1].as<long long>()};
      auto current = *load_run(w, run);
      return RunCharge{charge_refusal(current, kind), current.calls, current.budget};
    }
    w.exec("INSERT INTO runs (run_id, budget) VALUES (" + id + ", " + std::to_string(budget) +
           ") ON CONFLICT (run_id) DO NOTHING");
    auto counted = w.exec(std::string("UPDATE runs SET calls = calls + 1, updated_at = now() "
                                      "WHERE run_id = ") + id +
                          " AND calls < budget AND (state = 'active'" +
                          (kind == CallKind::read ? " OR state = 'frozen')" : ")"))
                       .affected_rows();
    auto current = *load_run(w, run);
    return RunCharge{counted ? ChargeOutcome::counted : charge_refusal(current, kind),
                     current.calls, current.budget};
  });
}

std::vector<Result<RunCharge>> PgStore::count_calls(std::span<const ChargeRequest> requests) {
  if (requests.size() == 1) return {count_call(requests.front().run, requests.front().budget, requests.front().kind)};
  std::vector<Result<RunCharge>> results(requests.size(), error_code(errc::invalid_argument));
  auto batch = transact([&](pqxx::transaction_base& w) {
    // Every run of the batch locked once, in run id order, and counted in
    // one UPDATE: a run's row is taken once per batch, not once per call.
    std::map<std::string, std::int64_t> budgets;
    for (const auto& r : requests) budgets.emplace(r.run, r.budget);
    ArrayParam ids, limits;
    for (const auto& [run, budget] : budgets) {
      ids.text(run);
      limits.number(budget);
    }
    auto const id_list = ids.str();
    w.exec_prepared("runs_create", id_list, limits.str());
    std::map<std::string, Run> runs;
    for (const auto& row : w.exec_prepared("runs_lock", id_list)) {
      PgRow r(row);
      runs[r.text(0)] = Run{r.text(0), parse_run_state(r.text(1)).value_or(RunState::killed), r.int64(2),
                            r.int64(3), r.text(4)};
    }
    std::map<std::string, std::int64_t> added;
    std::vector<Result<RunCharge>> done;
    for (const auto& r : requests) {
      auto& run = runs.at(r.run);
      bool const open = run.state == RunState::active || (run.state == RunState::frozen && r.kind == CallKind::read);
      if (open && run.calls < run.budget) {
        ++run.calls;
        ++added[r.run];
        done.emplace_back(RunCharge{ChargeOutcome::counted, run.calls, run.budget});
      } else {
        done.emplace_back(RunCharge{charge_refusal(run, r.kind), run.calls, run.budget});
      }
    }
    ArrayParam counted, counts;
    for (const auto& [run, n] : added) {
      counted.text(run);
      counts.number(n);
    }
    if (!added.empty()) w.exec_prepared("runs_add", counted.str(), counts.str());
    return done;
  });
  if (!batch) {
    for (auto& r : results) r = batch.error();
    return results;
  }
  return std::move(*batch);
}

std::optional<Result<Admission>> PgStore::admit_alone(const AdmitRequest& a) {
  const auto& r = a.reserve;
  // An agent's key is checked against its bindings before anything is
  // written: the batch does that.
  if (batch_ || !r.agent_key.empty() || !valid(r) || a.budget <= 0) return std::nullopt;
  bool const wants = a.first_attempt && a.first_attempt->max_attempts > 0;
  struct First {
    std::optional<RunCharge> counted;
    std::optional<Intent> inserted;
  };
  // The run's charge, the reservation and its first attempt in one
  // statement (its own transaction: one round trip). The attempt begins only
  // when the charge counted and the reservation is fresh, as in the batch.
  auto first = transact(
      [&](pqxx::transaction_base& w) {
        auto rows = w.exec_prepared(
            "admit_alone", r.run, a.budget, r.tool, r.scope, r.fingerprint, r.key, wants,
            wants ? a.first_attempt->lease.count() : std::int64_t{0}, r.request_snapshot, r.window.count(),
            r.unknown_ttl.count(), wants ? a.first_attempt->replica : std::string());
        First out;
        const auto& row = rows[0];
        auto const n = static_cast<int>(row.size());
        if (!row[n - 2].is_null())
          out.counted = RunCharge{ChargeOutcome::counted, row[n - 2].as<long long>(), row[n - 1].as<long long>()};
        if (!row[0].is_null()) out.inserted = read_intent(PgRow(row));
        return out;
      },
      Commit::one_statement);
  if (!first) return Result<Admission>(first.error());
  Admission admission;
  if (first->counted) {
    admission.charge = *first->counted;
  } else {
    auto run = find_run(r.run);
    if (!run) return Result<Admission>(run.error());
    admission.charge = RunCharge{charge_refusal(*run, CallKind::write), run->calls, run->budget};
  }
  if (first->inserted) {
    admission.reservation = Reservation{ReserveOutcome::reserved, std::move(*first->inserted), false};
    admission.reservation.started = admission.reservation.intent.state == IntentState::dispatched;
  } else {
    // A live intent holds the fingerprint: the batch's reservation (read it
    // back, or supersede it if its window has passed), without the charge,
    // which counted already.
    ReserveRequest again = r;
    if (wants && first->counted)
      again.start = ReserveRequest::Start{a.first_attempt->lease, a.first_attempt->replica};
    auto reserved = std::move(reserve_intents({&again, 1}).front());
    if (!reserved) return Result<Admission>(reserved.error());
    admission.reservation = std::move(*reserved);
  }
  if (admission.reservation.started)
    admission.start = AttemptStart{AttemptOutcome::started, 1, admission.reservation.intent};
  return Result<Admission>(std::move(admission));
}

Result<Run> PgStore::find_run(const std::string& run) {
  return transact([&](pqxx::transaction_base& w) {
    auto found = load_run(w, run);
    if (!found) throw Abort{errc::not_found};
    return *found;
  });
}

Result<Run> PgStore::set_run_state(const std::string& run, RunState state,
                                   const std::string& reason) {
  return transact([&](pqxx::transaction_base& w) {
    auto target = q(w, to_string(state));
    // The guard is the rule: a killed run never comes back.
    auto changed = w.exec("UPDATE runs SET state = " + target + ", reason = " + q(w, reason) +
                          ", updated_at = now() WHERE run_id = " + q(w, run) +
                          " AND (state <> 'killed' OR " + target + " = 'killed')")
                       .affected_rows();
    auto current = load_run(w, run);
    if (!current) throw Abort{errc::not_found};
    if (changed == 0 || !run_transition_allowed(current->state, state))
      throw Abort{errc::illegal_transition};
    return *current;
  });
}

Result<std::int64_t> PgStore::persist_escalation(const EscalationRequest& r) {
  return transact([&](pqxx::transaction_base& w) {
    return w
        .exec("INSERT INTO escalations (run_id, intent_id, reason_code, package) VALUES (" +
              q(w, r.run) + ", " + q(w, r.intent_id) + ", " + q(w, r.reason_code) + ", " +
              q(w, r.package_json) +
              ") ON CONFLICT (intent_id, reason_code) WHERE state = 'open' AND intent_id IS NOT NULL "
              "DO UPDATE SET package = EXCLUDED.package RETURNING id")[0][0]
        .as<std::int64_t>();
  });
}

Result<Escalation> PgStore::find_escalation(std::int64_t id) {
  return transact([&](pqxx::transaction_base& w) { return load_escalation(w, id); });
}

Result<std::vector<Escalation>> PgStore::list_escalations(std::optional<EscalationState> state,
                                                          int limit) {
  return transact([&](pqxx::transaction_base& w) {
    std::string where = state ? " WHERE state = " + q(w, to_string(*state)) : "";
    std::vector<Escalation> out;
    for (const auto& row : w.exec("SELECT " + std::string(escalation_columns) +
                                  " FROM escalations" + where + " ORDER BY id DESC LIMIT " +
                                  std::to_string(limit)))
      out.push_back(read_escalation(PgRow(row)));
    return out;
  });
}

Result<Escalation> PgStore::resolve_escalation(const ResolveRequest& r) {
  return transact([&](pqxx::transaction_base& w) {
    auto target = r.resolution == Resolution::approve  ? EscalationState::approved
                  : r.resolution == Resolution::deny   ? EscalationState::denied
                                                       : EscalationState::completed;
    auto changed = w.exec("UPDATE escalations SET state = " + q(w, to_string(target)) +
                          ", receipt = " + q(w, r.receipt) + ", note = " + q(w, r.note) +
                          ", resolved_at = now(), resolved_by = 'operator' WHERE id = " +
                          std::to_string(r.escalation_id) + " AND state = 'open'")
                       .affected_rows();
    auto escalation = load_escalation(w, r.escalation_id);
    if (changed == 0) throw Abort{errc::illegal_transition};
    if (escalation.intent_id && r.resolution != Resolution::approve) {
      bool complete = r.resolution == Resolution::complete;
      std::string receipt = r.receipt.empty() ? "" : ", receipt = " + q(w, r.receipt);
      auto settled =
          w.exec("UPDATE intents SET state = " +
                 q(w, to_string(complete ? IntentState::completed : IntentState::denied)) +
                 receipt + ", unknown_since = NULL, updated_at = now() WHERE id = " +
                 std::to_string(*escalation.intent_id) + " AND " +
                 sql_state_guard(resolution_sources(r.resolution)))
              .affected_rows();
      if (settled == 0) throw Abort{errc::illegal_transition};
    }
    return escalation;
  });
}

Result<void> PgStore::record_refusal(std::int64_t intent_id, const std::string& reason_code) {
  return transact([&](pqxx::transaction_base& w) {
    auto inserted = w.exec("INSERT INTO refusals (intent_id, run_id, tool, fingerprint, "
                           "reason_code) SELECT id, run_id, tool, fingerprint, " +
                           q(w, reason_code) + " FROM intents WHERE id = " +
                           std::to_string(intent_id))
                        .affected_rows();
    if (inserted == 0) throw Abort{errc::not_found};
  });
}

Result<Signals> PgStore::read_signals(TimePoint since) {
  return transact([&](pqxx::transaction_base& w) {
    auto const from = "to_timestamp(" + std::to_string(since.time_since_epoch().count()) + " / 1000.0)";
    auto const hour = std::string("to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:00:00\"Z\"')");
    Signals out;
    for (const auto& r : w.exec("SELECT reason_code, count(*) FROM escalations WHERE state = 'open' "
                                "GROUP BY reason_code ORDER BY reason_code"))
      out.open_escalations.push_back({r[0].as<std::string>(), r[1].as<std::int64_t>()});
    for (const auto& r : w.exec("SELECT " + hour + ", reason_code, escalations FROM "
                                "dash_escalations_by_reason_hourly WHERE hour >= date_trunc('hour', " + from +
                                ") ORDER BY hour, reason_code"))
      out.escalations_by_hour.push_back({r[0].as<std::string>(), r[1].as<std::string>(), r[2].as<std::int64_t>()});
    for (const auto& r : w.exec("SELECT tool, depth, intents FROM dash_retry_depth ORDER BY tool, depth"))
      out.retry_depth.push_back({r[0].as<std::string>(), r[1].as<int>(), r[2].as<std::int64_t>()});
    for (const auto& r : w.exec("SELECT " + hour + ", tool, reason_code, refusals, fingerprints FROM "
                                "dash_same_fingerprint_refusals WHERE hour >= date_trunc('hour', " + from +
                                ") ORDER BY hour, tool, reason_code"))
      out.refusals_by_hour.push_back({r[0].as<std::string>(), r[1].as<std::string>(), r[2].as<std::string>(),
                                      r[3].as<std::int64_t>(), r[4].as<std::int64_t>()});
    out.unknown_past_ttl = w.exec1("SELECT count(*) FROM dash_unknown_past_ttl")[0].as<std::int64_t>();
    out.duplicate_receipts = w.exec1("SELECT count(*) FROM dash_duplicate_receipts")[0].as<std::int64_t>();
    return out;
  });
}

Result<int> PgStore::recover_expired() {
  return transact([&](pqxx::transaction_base& w) {
    auto intents = w.exec("UPDATE intents SET state = 'unknown', recovered = true, "
                          "unknown_since = coalesce(unknown_since, now()), updated_at = now(), "
                          "lease_until = NULL WHERE state = 'dispatched' AND lease_until < now()")
                       .affected_rows();
    w.exec("UPDATE attempts SET state = 'unknown', recovered = true, finished_at = now() "
           "WHERE state = 'dispatched' AND lease_until < now()");
    return static_cast<int>(intents);
  });
}

}  // namespace idemgate::ledger
