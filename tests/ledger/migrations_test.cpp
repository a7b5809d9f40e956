// Versioned migrations: from empty, re-run idempotently, and a database newer
// than the binary refused; the dashboard views exist on both backends; the
// indexes of intents are the ones its queries use; an outcome logs no
// request snapshot again (PostgreSQL).
#include "backend.hpp"

#include "ledger/migrations.hpp"
#include "ledger/open_store.hpp"
#include "ledger/pg_admit.hpp"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

LEDGER_CONFORMANCE(migrations, "migrations from empty then re-run then a newer schema refused") {
  auto latest = latest_version(backend.name() == "sqlite" ? sqlite_migrations()
                                                          : postgresql_migrations());
  REQUIRE(latest >= 2);
  auto first = migrate(backend.config);
  REQUIRE_MESSAGE(first.has_value(), first.error().message());
  CHECK(*first == latest);
  auto again = migrate(backend.config);
  REQUIRE(again.has_value());
  CHECK(*again == latest);
  CHECK(backend.query("SELECT count(*) FROM schema_version") == std::to_string(latest) + "\n");
  { auto ledger = open_ledger(backend); }  // opening migrates nothing more
  CHECK(backend.query("SELECT count(*) FROM schema_version") == std::to_string(latest) + "\n");

  for (auto view : {"dash_escalations_by_reason_hourly", "dash_retry_depth",
                    "dash_same_fingerprint_refusals", "dash_unknown_past_ttl",
                    "dash_duplicate_receipts"})
    CHECK(backend.query(std::string("SELECT count(*) FROM ") + view) == "0\n");

  backend.query("INSERT INTO schema_version (version, name) VALUES (" +
                std::to_string(latest + 1) + ", 'from the future')");
  CHECK(migrate(backend.config).error() == errc::newer_schema);
  CHECK(Ledger::open(backend.config, {}, "replica-a").error() == errc::newer_schema);
}

TEST_CASE("unit: the PostgreSQL ledger needs a server of version 14 or later, and says so") {
  // (Every connection is checked so; the suite's server is 15, and no older
  // one is at hand to be refused for real.)
  CHECK(pg::check_server(0) == errc::unavailable);  // libpq's answer without a connection
  CHECK(pg::check_server(90624) == errc::old_server);
  CHECK(pg::check_server(130015) == errc::old_server);
  CHECK(pg::check_server(139999) == errc::old_server);
  CHECK_FALSE(pg::check_server(140000));
  CHECK_FALSE(pg::check_server(150004));
  CHECK_FALSE(pg::check_server(170002));
  auto const said = make_error_code(errc::old_server).message();
  CHECK(said.find("PostgreSQL") != std::string::npos);
  CHECK(said.find("14") != std::string::npos);
}

TEST_CASE("unit: embedded migrations are numbered from 1 without gaps on both backends") {
  for (auto list : {sqlite_migrations(), postgresql_migrations()}) {
    REQUIRE_FALSE(list.empty());
    for (std::size_t i = 0; i < list.size(); ++i) {
      CHECK(list[i].version == static_cast<int>(i) + 1);
      CHECK_FALSE(list[i].sql.empty());
    }
  }
  CHECK(latest_version(sqlite_migrations()) == latest_version(postgresql_migrations()));
}

TEST_CASE("unit: an unknown ledger URL is refused") {
  idemgate::config::Ledger config;
  config.url = "mysql://nope";
  CHECK(migrate(config).error() == errc::invalid_argument);
}

// Every reservation writes an entry into each index of intents: the set is
// what the queries need and no more (no index on every intent's state; the
// unknown ones by unknown_since; what is in flight by its lease, on its
// attempts row when it was begun apart). On PostgreSQL its pages keep room
// for the outcome's new version of a row.
LEDGER_CONFORMANCE(intent_indexes, "intents carry only the indexes their queries use") {
  REQUIRE(migrate(backend.config).has_value());
  auto const listed = [&](const std::string& table) {
    return backend.name() == "sqlite"
               ? backend.query("SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master "
                               "WHERE type = 'index' AND tbl_name = '" + table + "' AND sql IS NOT NULL "
                               "ORDER BY name)")
               : backend.query("SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes "
                               "WHERE tablename = '" + table + "' AND indexname <> '" + table + "_pkey'");
  };
  // The first attempts in flight on their intents: on PostgreSQL every
  // intent's latest lease (an outcome changes no indexed column), on SQLite
  // the dispatched ones'.
  CHECK(listed("intents") == (backend.name() == "sqlite"
                                  ? "intents_in_flight,intents_key,intents_live_fingerprint,intents_lookup_due,"
                                    "intents_run,intents_unknown\n"
                                  : "intents_key,intents_lease_end,intents_live_fingerprint,intents_lookup_due,"
                                    "intents_run,intents_unknown\n"));
  CHECK(listed("attempts") == "attempts_lease\n");
  // PostgreSQL leaves room in each page for the row's outcome version.
  if (backend.name() != "sqlite")
    CHECK(backend.query("SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = 'intents'") ==
          "fillfactor=40\n");
}

// An outcome rewrites its intent in place (a HOT update), and PostgreSQL
// logs the new version less the bytes it shares with the old one at its
// start and its end. Since version 14 the request snapshot, which the
// admission wrote and the outcome never changes, lies in that shared end:
// the outcome's WAL record does not carry it again.
TEST_CASE("postgresql: an outcome's WAL record leaves its intent's request snapshot out" *
          doctest::test_suite("db")) {
  auto backend = postgresql_backend();
  auto const field = [&](const std::string& sql) {
    auto v = backend->query(sql);
    return v.substr(0, v.find('\n'));
  };
  // pg_walinspect comes with PostgreSQL 15 (idemgate's ledger runs on 14
  // too), and under wal_level = logical every update is logged whole.
  if (std::stoi(field("SELECT current_setting('server_version_num')")) < 150000 ||
      field("SELECT current_setting('wal_level')") == "logical") {
    MESSAGE("skipped: needs PostgreSQL 15 or later (pg_walinspect) and wal_level below logical");
    return;
  }
  auto ledger = open_ledger(*backend);
  backend->query("CREATE EXTENSION IF NOT EXISTS pg_walinspect");
  auto const relation = field("SELECT (SELECT oid FROM pg_database WHERE datname = current_database()) || '/' || "
                              "pg_relation_filenode('intents')");
  // A record that holds a full-page image (the first change of its page
  // after a checkpoint, which another test's DROP DATABASE may make) logs
  // the page instead of the row: the test then writes another intent.
  bool measured = false;
  for (int round = 0; round < 5 && !measured; ++round) {
    CAPTURE(round);
    RequestSnapshot snapshot;
    snapshot.method = "POST";
    snapshot.target = "/v1/charges";
    // 1,200 bytes no compression shrinks much, and a row short of TOAST's
    // threshold, so that the snapshot is stored in the row itself.
    std::uint32_t x = 2463534242u + round;
    for (int i = 0; i < 1200; ++i) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      snapshot.body += "0123456789abcdef"[x % 16];
    }
    auto admitted = run(unboxed(ledger->admit(admit_request("fp-wal-" + std::to_string(round), "k-wal"),
                                              std::move(snapshot))));
    REQUIRE_MESSAGE(admitted.has_value(), admitted.error().message());
    REQUIRE(admitted->start.has_value());
    REQUIRE(admitted->start->outcome == AttemptOutcome::started);
    auto const id = admitted->reservation.intent.id;
    auto const stored =
        field("SELECT length(coalesce(redacted_request, request_snapshot)) FROM intents WHERE id = " +
              std::to_string(id));
    REQUIRE(std::stoi(stored) > 1200);
    auto const from = field("SELECT pg_current_wal_insert_lsn()");
    auto settled = run(ledger->record_outcome(completed(id, 1)));
    REQUIRE_MESSAGE(settled.has_value(), settled.error().message());
    auto const to = field("SELECT pg_current_wal_insert_lsn()");
    // pg_walinspect reads only WAL already flushed (an outcome recorded
    // after its answer may commit without waiting for the disk).
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto const flushed = [&] { return field("SELECT pg_current_wal_flush_lsn() >= '" + to + "'::pg_lsn") == "t"; };
    while (!flushed() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE_MESSAGE(flushed(), "the WAL up to " << to << " was not flushed within 10 s");
    // The intent's update records in between: the outcome's, one.
    auto const updates = backend->query(
        "SELECT record_type || ' ' || fpi_length || ' ' || (record_length - fpi_length) FROM "
        "pg_get_wal_records_info('" + from + "', '" + to + "') WHERE resource_manager = 'Heap' AND "
        "record_type LIKE '%UPDATE%' AND block_ref LIKE '%/" + relation + " %'");
    CAPTURE(updates);
    REQUIRE(std::count(updates.begin(), updates.end(), '\n') == 1);
    std::istringstream in(updates);
    std::string type;
    long fpi = 0, length = 0;
    in >> type >> fpi >> length;
    CHECK(type == "HOT_UPDATE");
    if (fpi > 0) continue;
    measured = true;
    // Without the snapshot the record is the changed columns between state
    // and retry_not_before (about 200 bytes here); with it, over 1,200.
    CHECK(length < 600);
  }
  CHECK(measured);
}

// A ledger at version 4 with intents in it (one unknown past its TTL, one
// in flight past its lease) migrates to the latest version: the rows stay,
// the unknown one is still found by the queries that now use the new
// indexes (5, 6), and the expired one is recovered through its attempt (6).
LEDGER_CONFORMANCE(upgrade_from_4, "a version 4 ledger with intents in it migrates to the latest version") {
  bool const sqlite = backend.name() == "sqlite";
  backend.query(sqlite ? "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                         "applied_at INTEGER NOT NULL DEFAULT 0)"
                       : "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                         "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())");
  for (const auto& m : sqlite ? sqlite_migrations() : postgresql_migrations()) {
    if (m.version > 4) break;
    backend.query(std::string(m.sql));
    backend.query("INSERT INTO schema_version (version, name) VALUES (" + std::to_string(m.version) + ", '" +
                  std::string(m.name) + "')");
  }
  // The rows as a version 4 ledger holds them, written in SQL: this
  // version's store writes columns later versions add (10).
  std::string const now = sqlite ? "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)" : "now()";
  auto const in_ms = [&](int ms) {
    return sqlite ? "(" + now + " + " + std::to_string(ms) + ")"
                  : "(now() + interval '" + std::to_string(ms) + " milliseconds')";
  };
  // A version 4 ledger keeps each intent's request in request_snapshot
  // (version 14 writes new ones to redacted_request).
  auto const snapshot_of = [](const std::string& fp) { return "{\"target\":\"/charges/" + fp + "\"}"; };
  // An intent with its attempt 1 in `attempt_state` (an unknown one is past
  // its TTL at once, the others have a day), dispatched with a lease of
  // `lease_ms` when the attempt is.
  auto insert = [&](const std::string& fp, const std::string& state, const std::string& answer_class,
                    const std::string& attempt_state, const std::string& receipt, int lease_ms) {
    bool const dispatched = state == "dispatched";
    auto const lease = dispatched ? in_ms(lease_ms) : std::string("NULL");
    auto row = backend.query(
        "INSERT INTO intents (run_id, tool, scope, fingerprint, idem_key, state, answer_class, attempts, receipt, "
        "request_snapshot, window_ms, unknown_ttl_ms, created_at, updated_at, window_until, unknown_since, "
        "lease_until) VALUES ('run-1', 'charge', 'run-1', '" + fp + "', 'key-" + fp + "', '" + state + "', '" +
        answer_class + "', 1, '" + receipt + "', '" + snapshot_of(fp) + "', 86400000, " +
        (state == "unknown" ? "0" : "86400000") + ", " + now + ", " + now + ", " + in_ms(86400000) + ", " +
        (state == "unknown" ? now : std::string("NULL")) + ", " + lease + ") RETURNING id");
    auto const id = row.substr(0, row.find('\n'));
    backend.query("INSERT INTO attempts (intent_id, number, replica_id, state, answer_class, receipt, started_at, "
                  "finished_at, lease_until) VALUES (" + id + ", 1, 'replica-a', '" + attempt_state + "', '" +
                  answer_class + "', '" + receipt + "', " + now + ", " + (dispatched ? "NULL" : now) + ", " + lease +
                  ")");
    return std::stoll(id);
  };
  auto const unknown_id = insert("fp-unknown", "unknown", "unknown", "unknown", "", 0);
  auto const done_id = insert("fp-done", "completed", "ok", "answered", "r-done", 0);
  auto const expired_id = insert("fp-expired", "dispatched", "", "dispatched", "", 1);
  // Dispatched with a live lease but no attempt in flight: what ledgers from
  // before leases could hold. Nothing could recover it through attempts.
  auto const orphan_id = insert("fp-orphan", "dispatched", "", "dispatched", "", 60000);
  backend.query("UPDATE attempts SET state = 'answered' WHERE intent_id = " + std::to_string(orphan_id));
  auto migrated = migrate(backend.config);
  REQUIRE_MESSAGE(migrated.has_value(), migrated.error().message());
  CHECK(*migrated == latest_version(sqlite ? sqlite_migrations() : postgresql_migrations()));
  CHECK(backend.query("SELECT count(*) FROM intents") == "4\n");
  // The orphan is unknown now (recovered), with a TTL of its own.
  CHECK(backend.query("SELECT state || ',' || recovered FROM intents WHERE id = " + std::to_string(orphan_id)) ==
        (sqlite ? "unknown,1\n" : "unknown,true\n"));
  CHECK(backend.query("SELECT count(*) FROM dash_unknown_past_ttl") == "1\n");
  auto stores = open_stores(backend.config);
  REQUIRE(stores.has_value());
  auto& store = *stores->front();
  CHECK(store.find_intent(unknown_id)->state == IntentState::unknown);
  CHECK(store.find_intent(done_id)->state == IntentState::completed);
  CHECK(store.find_intent(done_id)->request_snapshot == snapshot_of("fp-done"));
  auto unescalated = store.list_unescalated_unknowns(10);
  REQUIRE(unescalated.has_value());
  REQUIRE(unescalated->size() == 1);
  CHECK(unescalated->front().id == unknown_id);
  CHECK(unescalated->front().request_snapshot == snapshot_of("fp-unknown"));
  // Its 1 ms lease has passed by now, or within the deadline.
  int recovered = 0;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       recovered == 0 && std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(5))) {
    auto n = store.recover_expired();
    REQUIRE_MESSAGE(n.has_value(), n.error().message());
    recovered = *n;
  }
  CHECK(recovered == 1);
  CHECK(store.find_intent(expired_id)->state == IntentState::unknown);
  CHECK(backend.query("SELECT state FROM attempts WHERE intent_id = " + std::to_string(expired_id)) == "unknown\n");
}
