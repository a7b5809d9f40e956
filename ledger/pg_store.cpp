// The PostgreSQL backend's connection and transactions (see pg_store.hpp
// for the whole backend): connecting, with the statements prepared once per
// connection, batch() and migrate(). What every method body runs in
// (transact(), in_savepoint()) is in pg_support.hpp; the bodies themselves
// in pg_intents.cpp, pg_reads.cpp, pg_runs.cpp and pg_escalations.cpp.
#include "ledger/pg_store.hpp"

#include "ledger/migrations.hpp"
#include "ledger/pg_support.hpp"

#include <algorithm>

namespace idemgate::ledger {

namespace pg {

std::string with_default(std::string url, std::string_view option) {
  std::string const name(option.substr(0, option.find('=') + 1));
  if (url.find(name) != std::string::npos) return url;
  url += url.find('?') == std::string::npos ? '?' : '&';
  url += option;
  return url;
}

std::string with_bounds(std::string url) {
  for (std::string_view option : {"connect_timeout=5", "keepalives=1", "keepalives_idle=10", "keepalives_interval=5",
                                  "keepalives_count=3", "tcp_user_timeout=30000"})
    url = with_default(std::move(url), option);
  return url;
}

std::string session_settings(Millis statement_timeout) {
  auto ms = std::to_string(statement_timeout.count());
  return "SET statement_timeout = " + ms + "; SET lock_timeout = " + ms +
         "; SET idle_in_transaction_session_timeout = " + ms + "; SET synchronous_commit = on";
}

namespace {

// intent_columns with the request snapshot left out (NULL): the caller sent
// it and has it, and it holds the whole (redacted) request body.
std::string without_snapshot() {
  std::string columns(intent_columns);
  columns.replace(columns.find(request_snapshot_column), request_snapshot_column.size(), "NULL::text");
  return columns;
}

}  // namespace

// $1 run, $2 budget, $3 tool, $4 scope, $5 fingerprint, $6 key, $7 begin
// the attempt, $8 lease ms, $9 request snapshot, $10 window ms, $11 unknown
// ttl ms, $12 replica (admit_alone_params). An attempt begun lives on its
// intent until it ends, its lease from the clock once the lease lock is held
// (never before it: the lease sweep's horizon relies on that).
std::string admit_alone_sql() {
  return "WITH " + std::string(lease_lock) + ", "
         "charge AS (INSERT INTO runs (run_id, budget, calls) VALUES ($1::text, $2::bigint, 1) "
         "ON CONFLICT (run_id) DO UPDATE SET calls = runs.calls + 1, updated_at = now() "
         "WHERE runs.calls < runs.budget AND runs.state = 'active' RETURNING calls, budget), "
         "g AS (SELECT $7::boolean AND EXISTS (SELECT 1 FROM charge) AS go FROM lease_lock), "
         "ins AS (INSERT INTO intents (run_id, tool, scope, fingerprint, idem_key, state, attempts, lease_until, "
         "replica_id, redacted_request, window_ms, unknown_ttl_ms, window_until) SELECT $1::text, $3::text, "
         "$4::text, $5::text, $6::text, CASE WHEN g.go THEN 'dispatched' ELSE 'reserved' END, "
         "CASE WHEN g.go THEN 1 ELSE 0 END, "
         "CASE WHEN g.go THEN clock_timestamp() + greatest($8::bigint, 0) * interval '1 millisecond' END, "
         "CASE WHEN g.go THEN $12::text END, $9::text, $10::bigint, $11::bigint, "
         "now() + $10::bigint * interval '1 millisecond' FROM g "
         "ON CONFLICT (scope, fingerprint) WHERE NOT superseded DO NOTHING RETURNING *) "
         "SELECT " + without_snapshot() + ", charge.calls AS charged_calls, charge.budget AS charged_budget "
         "FROM (SELECT 1) AS one LEFT JOIN ins ON true LEFT JOIN charge ON true";
}

namespace {

// Store::record_outcomes for one round (an intent once) calls a function of
// migrations 0007 and 0008 (their planner settings and lock order are their
// own): its columns $1-$16 as ArrayParams, $17 true when the commit need not
// wait for the disk. idemgate_record_outcomes gives the settled intents,
// idemgate_settle_outcomes only their ids (it reads no row back).
std::string outcomes_call(std::string_view function) {
  return std::string(function) +
         "($1::bigint[], $2::text[], $3::text[], $4::int[], $5::bigint[], $6::int[], "
         "$7::text[], $8::boolean[], $9::int[], $10::text[], $11::bytea[], $12::boolean[], $13::int[], $14::text[], "
         "$15::text[], $16::text[], $17::boolean)";
}

// Store::reserve_intents' insert: the rows (ArrayParam columns, in lock
// order, one a fingerprint) that get in, each with attempt 1 begun when its
// $9 is set (lease $10 ms from the clock once the lease lock is held, never
// before it; replica $11: the attempt lives on its intent until it ends),
// come back as reserved_columns. The insert hands on only what that answer
// needs (what a data-modifying CTE keeps of its rows is copied, and
// RETURNING * would copy the request snapshot), and the server's own times
// are one value, now().
//
// `careful`: a row whose fingerprint is live already is passed over (ON
// CONFLICT DO NOTHING). Otherwise it fails the statement with a unique
// violation: a fresh insert skips the speculative insertion ON CONFLICT
// costs every row (a probe of the fingerprint index before the insert, a
// lock on a token and a confirming WAL record: about 2.6 us of the
// server's CPU a guarded write at 256 connections, 2026-12-07), and the
// store runs it again carefully when it fails (PgStore::reserve_intents).
std::string reserve_intents_sql(bool careful) {
  return "WITH " + std::string(lease_lock) + ", "
         "ins AS (INSERT INTO intents (run_id, tool, scope, fingerprint, idem_key, state, attempts, lease_until, "
         "replica_id, redacted_request, window_ms, unknown_ttl_ms, window_until) "
         "SELECT r.run, r.tool, r.scope, r.fingerprint, r.idem_key, "
         "CASE WHEN r.start THEN 'dispatched' ELSE 'reserved' END, CASE WHEN r.start THEN 1 ELSE 0 END, "
         "CASE WHEN r.start THEN clock_timestamp() + greatest(r.lease_ms, 0) * interval '1 millisecond' END, "
         "CASE WHEN r.start THEN $11::text END, r.snapshot, r.window_ms, "
         "r.ttl_ms, now() + r.window_ms * interval '1 millisecond' "
         "FROM lease_lock, unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], "
         "$7::bigint[], $8::bigint[], $9::boolean[], $10::bigint[]) AS r(run, tool, scope, fingerprint, idem_key, "
         "snapshot, window_ms, ttl_ms, start, lease_ms) "
         + std::string(careful ? "ON CONFLICT (scope, fingerprint) WHERE NOT superseded DO NOTHING " : "") +
         "RETURNING id, scope, fingerprint, idem_key, lease_until) "
         "SELECT " + std::string(reserved_columns) + " FROM ins, "
         "(SELECT (extract(epoch from now()) * 1000)::bigint AS ms) AS now_ms";
}

}  // namespace

}  // namespace pg

PgStore::PgStore(std::string url, Millis statement_timeout)
    : url_(with_bounds(std::move(url))), statement_timeout_(statement_timeout) {}

PgStore::~PgStore() = default;

void PgStore::drop_connection() { connection_.reset(); }

error_code PgStore::connect() {
  if (connection_ && connection_->c.is_open() && !ended_by_server(connection_->c.sock())) return {};
  connection_.reset();
  auto now = std::chrono::steady_clock::now();
  if (now < next_connect_) return errc::unavailable;
  // A failed connection, or a server refused (named), backs off: calls until
  // then fail fast with unavailable.
  auto back_off = [&](error_code why) {
    backoff_ = std::clamp(backoff_ * 2, Millis(50), Millis(2000));
    next_connect_ = now + backoff_;
    return why;
  };
  try {
    auto c = std::make_unique<Connection>(url_);
    if (auto ec = pg::check_server(c->c.server_version())) return back_off(ec);
    pqxx::nontransaction setup(c->c);
    // A blocking statement is bounded here, not by the caller: the worker
    // thread gets its answer (or 57014) within statement_timeout.
    setup.exec(session_settings(statement_timeout_));
    setup.commit();
    // admit_alone's statement, planned once per connection (its plan is
    // most of its server time at one connection).
    c->c.prepare("admit_alone", admit_alone_sql());
    c->c.prepare("record_outcomes",
                 "SELECT " + std::string(intent_columns) + " FROM " + outcomes_call("idemgate_record_outcomes"));
    // The same for outcomes after their answers: the ids alone.
    c->c.prepare("record_outcomes_ids",
                 "SELECT id FROM unnest(" + outcomes_call("idemgate_settle_outcomes") + ") AS id");
    c->c.prepare("reserve_intents", reserve_intents_sql(true));
    c->c.prepare("reserve_intents_fresh", reserve_intents_sql(false));
    // count_calls' runs ($1 ids, $2 budgets of new ones), each created if
    // missing and locked, in id order (the lock order), one round trip: the
    // no-op update locks and returns a run that exists (a HOT update: no
    // indexed column changes).
    c->c.prepare("runs_take", "INSERT INTO runs (run_id, budget) SELECT v.id, v.budget FROM "
                              "unnest($1::text[], $2::bigint[]) AS v(id, budget) ORDER BY v.id "
                              "ON CONFLICT (run_id) DO UPDATE SET budget = runs.budget "
                              "RETURNING run_id, state, calls, budget, reason");
    c->c.prepare("runs_add", "UPDATE runs SET calls = calls + v.n, updated_at = now() "
                             "FROM unnest($1::text[], $2::bigint[]) AS v(id, n) WHERE runs.run_id = v.id");
    // record_outcomes: which of a round's refused intents exist ($1 ids).
    c->c.prepare("intents_exist", "SELECT id FROM intents WHERE id = ANY ($1::bigint[])");
    connection_ = std::move(c);
    backoff_ = Millis(0);
    return {};
  } catch (const std::exception&) {
    return back_off(errc::unavailable);
  }
}

error_code PgStore::batch(const std::function<void()>& body, Calls calls, Durability durability) {
  if (batch_ || deferring_) return errc::invalid_argument;
  if (durability == Durability::deferred) {
    // Outcomes recorded after their answers, and nothing else: each round of
    // them is one statement, which commits by itself and waits for no WAL
    // flush (the WAL writer flushes it within a few wal_writer_delay). No
    // BEGIN and COMMIT round trips, and the disk's wait leaves this lane.
    struct Deferring {
      bool& on;
      explicit Deferring(bool& flag) : on(flag) { on = true; }
      ~Deferring() { on = false; }
    } deferring(deferring_);
    try {
      body();
    } catch (const std::exception&) {
      return errc::storage_failure;
    }
    return {};
  }
  if (auto ec = connect()) return ec;
  error_code error;
  try {
    OpenBatch open(connection_->c, calls);
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

}  // namespace idemgate::ledger
