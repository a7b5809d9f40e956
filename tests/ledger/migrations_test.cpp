// Versioned migrations: from empty, re-run idempotently, and a database newer
// than the binary refused; the dashboard views exist on both backends; the
// indexes of intents are the ones its queries use.
#include "backend.hpp"

#include "ledger/migrations.hpp"
#include "ledger/open_store.hpp"

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

// Every reservation and every outcome writes an entry into each index of
// intents: the set is what the queries need and no more (no index on every
// intent's state; the unknown ones by unknown_since). On PostgreSQL its
// pages keep room for the outcome's new version of a row.
LEDGER_CONFORMANCE(intent_indexes, "intents carry only the indexes their queries use") {
  REQUIRE(migrate(backend.config).has_value());
  auto const listed = backend.name() == "sqlite"
                          ? backend.query("SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master "
                                          "WHERE type = 'index' AND tbl_name = 'intents' AND sql IS NOT NULL "
                                          "ORDER BY name)")
                          : backend.query("SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes "
                                          "WHERE tablename = 'intents' AND indexname <> 'intents_pkey'");
  CHECK(listed == "intents_key,intents_lease,intents_live_fingerprint,intents_lookup_due,intents_run,intents_unknown\n");
  // PostgreSQL leaves room in each page for the row's outcome version.
  if (backend.name() != "sqlite")
    CHECK(backend.query("SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = 'intents'") ==
          "fillfactor=70\n");
}

// A ledger at version 4 with intents in it (one unknown past its TTL)
// migrates to 5: the rows stay, and the unknown one is still found by the
// queries that now use the new index.
LEDGER_CONFORMANCE(upgrade_4_to_5, "a version 4 ledger with intents in it migrates to version 5") {
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
  std::int64_t unknown_id = 0, done_id = 0;
  {
    auto stores = open_stores(backend.config);
    REQUIRE_MESSAGE(stores.has_value(), stores.error().message());
    auto& store = *stores->front();
    auto reserve = [&](const std::string& fp) {
      auto request = reserve_request(fp, "key-" + fp);
      request.unknown_ttl = Millis(0);  // an unknown is past its TTL at once
      auto r = store.reserve_intents({&request, 1}).front();
      REQUIRE_MESSAGE(r.has_value(), r.error().message());
      REQUIRE(store.begin_attempt(attempt_now(store, r->intent.id), "replica-a").has_value());
      return r->intent.id;
    };
    unknown_id = reserve("fp-unknown");
    done_id = reserve("fp-done");
    Outcome unknown;
    unknown.intent_id = unknown_id;
    unknown.attempt = 1;
    unknown.state = IntentState::unknown;
    unknown.answer_class = "unknown";
    unknown.retry_after = Millis(0);
    REQUIRE(store.record_outcome(unknown).has_value());
    REQUIRE(store.record_outcome(completed(done_id, 1)).has_value());
  }
  auto migrated = migrate(backend.config);
  REQUIRE_MESSAGE(migrated.has_value(), migrated.error().message());
  CHECK(*migrated == 5);
  CHECK(backend.query("SELECT count(*) FROM intents") == "2\n");
  CHECK(backend.query("SELECT count(*) FROM dash_unknown_past_ttl") == "1\n");
  auto stores = open_stores(backend.config);
  REQUIRE(stores.has_value());
  auto& store = *stores->front();
  CHECK(store.find_intent(unknown_id)->state == IntentState::unknown);
  CHECK(store.find_intent(done_id)->state == IntentState::completed);
  auto unescalated = store.list_unescalated_unknowns(10);
  REQUIRE(unescalated.has_value());
  REQUIRE(unescalated->size() == 1);
  CHECK(unescalated->front().id == unknown_id);
}
