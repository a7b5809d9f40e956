// PostgreSQL's batch reservations insert fresh (no ON CONFLICT) and run
// again, passing over live fingerprints, only when one refused them: in
// their own transaction or savepoint, or with the whole batch of admissions
// that has none; and careful for a while after.
#include "pg_sessions.hpp"

#include <string>
#include <thread>
#include <vector>

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

// A batch's reservation inserts its rows fresh, without ON CONFLICT (whose
// speculative insertion costs every row a probe, a token lock and a WAL
// record). A fingerprint that is live already fails that statement; the
// reservation then runs again passing over live fingerprints, and so do the
// store's next 64 reservations, so that retries coming one after
// another cost one rerun, not one each. The answers are those of a careful
// insert every time: the live intent for its fingerprint, no second row.
// Where the rerun happens: in the call's own transaction or savepoint; a
// batch without savepoints fails whole (errc::conflict), for the ledger to
// run again.
TEST_CASE("postgresql: a reservation inserts fresh, a live fingerprint costs one rerun, then a run of careful ones" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  auto stores = sessions(*backend, 2);
  // Every transaction that rolls back in this database is counted below: no
  // autovacuum worker's (one cancelled rolls back).
  backend->query("ALTER TABLE intents SET (autovacuum_enabled = off); "
                 "ALTER TABLE runs SET (autovacuum_enabled = off); "
                 "ALTER TABLE agent_keys SET (autovacuum_enabled = off)");
  auto const rollbacks = "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()";
  auto const before = std::stol(backend->query(rollbacks));
  auto reserve = [](Store& store, std::vector<ReserveRequest> requests) {
    auto results = store.reserve_intents(requests);
    for (auto& r : results) REQUIRE_MESSAGE(r.has_value(), r.error().message());
    return results;
  };
  auto& store = *stores[0];
  auto first = reserve(store, {reserve_request("fp-live", "key-1")}).front();
  REQUIRE(first->outcome == ReserveOutcome::reserved);
  auto const live_id = first->intent.id;
  auto expect_existing = [&](const Result<Reservation>& r) {
    CHECK(r->outcome == ReserveOutcome::existing);
    CHECK(r->intent.id == live_id);
    CHECK(r->intent.key == "key-1");
  };
  // Refused fresh (a rollback), then careful: the others reserved, the live
  // one existing.
  auto second = reserve(store, {reserve_request("fp-b", "key-b"), reserve_request("fp-live", "key-2"),
                                reserve_request("fp-c", "key-c")});
  CHECK(second[0]->outcome == ReserveOutcome::reserved);
  expect_existing(second[1]);
  CHECK(second[2]->outcome == ReserveOutcome::reserved);
  // The next 64 reservations are careful: no rollback, whatever they meet.
  expect_existing(reserve(store, {reserve_request("fp-d", "key-d"), reserve_request("fp-live", "key-3")})[1]);
  for (int i = 0; i < 63; ++i)
    CHECK(reserve(store, {reserve_request("fp-n" + std::to_string(i), "key-n" + std::to_string(i))})
              .front()
              ->outcome == ReserveOutcome::reserved);
  // Then fresh again: refused once more.
  expect_existing(reserve(store, {reserve_request("fp-e", "key-e"), reserve_request("fp-live", "key-4")})[1]);

  // A batch without savepoints fails whole, nothing written; run again
  // (as the ledger does), its reservation is careful.
  auto& other = *stores[1];
  // Two requests of one batch for one new fingerprint: sent once, so not
  // refused (the first asked wins, the second is existing), and the next
  // reservation is fresh still (below: its batch fails).
  auto twice = reserve(other, {reserve_request("fp-twice", "key-t1"), reserve_request("fp-twice", "key-t2")});
  CHECK(twice[0]->outcome == ReserveOutcome::reserved);
  CHECK(twice[1]->outcome == ReserveOutcome::existing);
  CHECK(twice[1]->intent.key == "key-t1");
  std::vector<ReserveRequest> together{reserve_request("fp-t", "key-t"), reserve_request("fp-live", "key-5")};
  std::vector<Result<Reservation>> results;
  auto const body = [&] { results = other.reserve_intents(together); };
  CHECK(other.batch(body, Store::Calls::together) == errc::conflict);
  CHECK(backend->query("SELECT count(*) FROM intents WHERE fingerprint = 'fp-t'") == "0\n");
  REQUIRE(!other.batch(body, Store::Calls::together));
  REQUIRE(results.size() == 2);
  REQUIRE(results[0].has_value());
  CHECK(results[0]->outcome == ReserveOutcome::reserved);
  REQUIRE(results[1].has_value());
  expect_existing(results[1]);

  CHECK(backend->query("SELECT count(*) FROM intents WHERE fingerprint = 'fp-live'") == "1\n");
  CHECK(backend->query("SELECT count(*) FROM intents") == "70\n");
  // Each refusal is counted by its store (idemgate_ledger_reservation_reruns_total).
  CHECK(store.reservation_reruns() == 2);
  CHECK(other.reservation_reruns() == 1);
  stores.clear();  // the sessions end: their statistics reach the shared counters
  // Two refused statements in the first session, one in the second (its
  // batch's transaction).
  auto const want = std::to_string(before + 3) + "\n";
  CHECK(reaches(*backend, rollbacks, want) == want);
}

// In a batch with savepoints the reservation runs again in its own: the
// batch's other calls stand. And a live fingerprint another session is still
// inserting: the fresh insert waits for it, is refused when it commits, and
// the careful rerun answers with that session's intent.
TEST_CASE("postgresql: a fresh reservation refused runs again in its savepoint, and after a concurrent insert" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  auto stores = sessions(*backend, 3);
  auto& store = *stores[0];
  auto live = store.reserve_intents(std::vector{reserve_request("fp-live", "key-1")}).front();
  REQUIRE(live.has_value());
  std::vector<Result<Reservation>> first, second;
  REQUIRE(!store.batch(
      [&] {
        first = store.reserve_intents(std::vector{reserve_request("fp-a", "key-a")});
        second = store.reserve_intents(std::vector{reserve_request("fp-b", "key-b"),
                                                   reserve_request("fp-live", "key-2")});
      },
      Store::Calls::isolated));
  REQUIRE(first.front().has_value());
  CHECK(first.front()->outcome == ReserveOutcome::reserved);
  REQUIRE(second[0].has_value());
  CHECK(second[0]->outcome == ReserveOutcome::reserved);
  REQUIRE(second[1].has_value());
  CHECK(second[1]->outcome == ReserveOutcome::existing);
  CHECK(second[1]->intent.id == live->intent.id);
  CHECK(backend->query("SELECT fingerprint, count(*) FROM intents GROUP BY 1 ORDER BY 1") ==
        "fp-a|1\nfp-b|1\nfp-live|1\n");

  // Session 1 inserts fp-racing and holds its transaction open; session 2's
  // fresh insert of it waits, and is refused once session 1 commits.
  std::int64_t racing_id = 0;
  std::vector<Result<Reservation>> raced;
  {
    HeldBatch held(*stores[1], [&] {
      auto r = stores[1]->reserve_intents(std::vector{reserve_request("fp-racing", "key-r1")}).front();
      REQUIRE(r.has_value());
      racing_id = r->intent.id;
    });
    std::thread waiting([&] {
      raced = stores[2]->reserve_intents(
          std::vector{reserve_request("fp-racing", "key-r2"), reserve_request("fp-w", "key-w")});
    });
    CHECK(lock_waits(*backend, "1\n") == "1\n");
    held.release();
    waiting.join();
  }
  REQUIRE(raced.size() == 2);
  REQUIRE(raced[0].has_value());
  CHECK(raced[0]->outcome == ReserveOutcome::existing);
  CHECK(raced[0]->intent.id == racing_id);
  REQUIRE(raced[1].has_value());
  CHECK(raced[1]->outcome == ReserveOutcome::reserved);
  CHECK(backend->query("SELECT count(*) FROM intents WHERE fingerprint = 'fp-racing'") == "1\n");
}
