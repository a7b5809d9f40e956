// How PostgreSQL executes the write path's statements, checked through the
// server's own statistics (pg_stat_user_tables) after the store's session
// has ended and flushed them: an outcome is a HOT update, and no statement
// of the write path scans a whole table, however small the ledger was when
// its plan was made.
#include "backend.hpp"

#include "ledger/migrations.hpp"
#include "ledger/open_store.hpp"

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

namespace {

// Polls `sql` until its answer satisfies `done`, or 10 s pass; the last answer.
template <class Done>
std::string poll_until(Backend& backend, const std::string& sql, Done done) {
  std::string now;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    now = backend.query(sql);
    if (done(now)) break;
  }
  return now;
}

std::string changed_from(Backend& backend, const std::string& sql, const std::string& before) {
  return poll_until(backend, sql, [&](const std::string& now) { return now != before; });
}

std::string reaches(Backend& backend, const std::string& sql, const std::string& want) {
  return poll_until(backend, sql, [&](const std::string& now) { return now == want; });
}

// How many sessions of the test's database wait for a lock, once `want`
// do (or after the deadline).
std::string lock_waits(Backend& backend, const std::string& want) {
  return reaches(backend,
                 "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                 "AND wait_event_type = 'Lock'",
                 want);
}

// The intents no transaction holds (SKIP LOCKED passes over the others).
std::string free_intents(Backend& backend) {
  return backend.query(
      "SELECT string_agg(id::text, ',' ORDER BY id) FROM (SELECT id FROM intents FOR UPDATE SKIP LOCKED) f");
}

// The sessions of a migrated ledger's store pool (`at_least` of them): one
// for the call under test, others to hold transactions open beside it.
std::vector<std::unique_ptr<Store>> sessions(Backend& backend, std::size_t at_least = 2) {
  REQUIRE(migrate(backend.config).has_value());
  auto stores = open_stores(backend.config);
  REQUIRE_MESSAGE(stores.has_value(), stores.error().message());
  REQUIRE(stores->size() >= at_least);
  return std::move(*stores);
}

// Runs `body` in a batch of `store` on a thread of its own and keeps that
// transaction open, its locks held, until release() (or the end of the
// scope); the batch commits then.
class HeldBatch {
 public:
  template <class Body>
  HeldBatch(Store& store, Body body)
      : thread_([this, &store, body] {
          store.batch(
              [&] {
                body();
                opened_.set_value();
                released_.get_future().wait();
              },
              Store::Calls::together);
        }) {
    opened_.get_future().wait();
  }
  HeldBatch(const HeldBatch&) = delete;
  HeldBatch& operator=(const HeldBatch&) = delete;
  ~HeldBatch() { release(); }
  void release() {
    if (!thread_.joinable()) return;
    released_.set_value();
    thread_.join();
  }

 private:
  std::promise<void> opened_, released_;
  std::thread thread_;  // last: started once the promises exist
};

}  // namespace

// PostgreSQL rewrites a row in place (HOT: no index entry written) only when
// no indexed column changed, predicates included. An outcome changes the
// intent's state, which no index of intents may depend on, or each outcome
// writes an entry into every one of them; it keeps the intent's lease,
// which intents_lease_end indexes. And a first attempt begun with its
// reservation is written to attempts once, when it ends: one insert, no
// update.
TEST_CASE("postgresql: an outcome rewrites its intent in place (a HOT update)" * doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  REQUIRE(migrate(backend->config).has_value());
  {
    auto stores = open_stores(backend->config);
    REQUIRE_MESSAGE(stores.has_value(), stores.error().message());
    auto& store = *stores->front();
    for (const std::string fp : {"fp-1", "fp-2", "fp-3"}) {
      auto request = reserve_request(fp, "key-" + fp);
      request.start = ReserveRequest::Start{Millis(60000), "replica-a"};
      auto r = store.reserve_intents({&request, 1}).front();
      REQUIRE_MESSAGE(r.has_value(), r.error().message());
      REQUIRE(r->started);
      REQUIRE(store.record_outcome(completed(r->intent.id, 1)).has_value());
    }
  }  // the store's session ends: its statistics reach the shared counters
  CHECK(reaches(*backend, "SELECT n_tup_upd || ',' || n_tup_hot_upd FROM pg_stat_user_tables "
                          "WHERE relname = 'intents'", "3,3\n") == "3,3\n");
  CHECK(reaches(*backend, "SELECT n_tup_ins || ',' || n_tup_upd FROM pg_stat_user_tables "
                          "WHERE relname = 'attempts'", "3,0\n") == "3,0\n");
}


// A prepared statement's generic plan is made at its sixth execution, from
// the table as it is then: on a ledger that started empty it was a hash join
// over a sequential scan of intents, kept for every later outcome until
// autovacuum analysed the table. The outcome function plans with nested
// loops over index scans (its own settings), alone, several at once, and in
// a deferred batch.
TEST_CASE("postgresql: outcomes find their intents by index on a ledger that started empty" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  REQUIRE(migrate(backend->config).has_value());
  // The migration's own scans reach the counters (its session has ended),
  // then they start again from zero.
  auto const scans = "SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'intents'";
  REQUIRE(changed_from(*backend, scans, "0\n") != "0\n");
  backend->query("SELECT pg_stat_reset()");
  REQUIRE(reaches(*backend, scans, "0\n") == "0\n");
  int outcomes = 0;
  {
    auto stores = open_stores(backend->config);
    REQUIRE_MESSAGE(stores.has_value(), stores.error().message());
    auto& store = *stores->front();
    for (int round = 0; round < 12; ++round) {
      // One alone, then three at once: both forms, past their sixth execution.
      std::vector<Outcome> batch;
      for (int i = 0; i < 4; ++i) {
        auto fp = "fp-" + std::to_string(round) + "-" + std::to_string(i);
        auto request = reserve_request(fp, "key-" + fp);
        request.start = ReserveRequest::Start{Millis(60000), "replica-a"};
        auto r = store.reserve_intents({&request, 1}).front();
        REQUIRE_MESSAGE(r.has_value(), r.error().message());
        batch.push_back(completed(r->intent.id, 1));
      }
      REQUIRE(store.record_outcome(batch.front()).has_value());
      std::vector<Outcome> rest(batch.begin() + 1, batch.end());
      std::vector<Result<Intent>> settled;
      if (round % 2) {
        // As outcomes recorded after their answers are: no transaction.
        for (auto& o : rest) o.after_answer = true;
        REQUIRE(!store.batch([&] { settled = store.record_outcomes(rest); }, Store::Calls::isolated,
                             Store::Durability::deferred));
      } else {
        settled = store.record_outcomes(rest);
      }
      REQUIRE(settled.size() == rest.size());
      for (auto& s : settled) REQUIRE_MESSAGE(s.has_value(), s.error().message());
      outcomes += 4;
    }
  }
  auto const updated = std::to_string(outcomes) + "\n";
  REQUIRE(reaches(*backend, "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'intents'", updated) ==
          updated);
  CHECK(backend->query(scans) == "0\n");
}

// An outcome that ends a first attempt begun with its reservation writes the
// attempt's row unless one is there (a lease sweep wrote it). Schema version
// 10 asked with an anti-join, and the function's generic plan, made at its
// first call while attempts was small, could read every first attempt's
// entry of the primary key for each outcome: a round's cost grew with the
// whole table until autovacuum analysed it. Version 11 probes the key by
// both columns, one outcome at a time, whatever the plan was made from.
TEST_CASE("postgresql: an outcome looks for its first attempt's row by both keys, however small attempts was" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  auto stores = sessions(*backend, 1);
  auto& store = *stores.front();
  auto round = [&](const std::string& name, int count, bool after_answer) {
    std::vector<Outcome> outcomes;
    for (int i = 0; i < count; ++i) {
      auto fp = name + "-" + std::to_string(i);
      auto request = reserve_request(fp, "key-" + fp);
      request.start = ReserveRequest::Start{Millis(60000), "replica-a"};
      auto r = store.reserve_intents({&request, 1}).front();
      REQUIRE_MESSAGE(r.has_value(), r.error().message());
      outcomes.push_back(completed(r->intent.id, 1));
      outcomes.back().after_answer = after_answer;
    }
    std::vector<Result<Intent>> settled;
    if (after_answer)
      REQUIRE(!store.batch([&] { settled = store.record_outcomes(outcomes); }, Store::Calls::isolated,
                           Store::Durability::deferred));
    else
      settled = store.record_outcomes(outcomes);
    REQUIRE(settled.size() == outcomes.size());
    for (auto& s : settled) REQUIRE_MESSAGE(s.has_value(), s.error().message());
  };
  // Both functions planned on an empty table (the function's plan, in this
  // session, for good: no autovacuum analyses attempts and so replans it).
  backend->query("ALTER TABLE attempts SET (autovacuum_enabled = off)");
  round("small-a", 3, false);
  round("small-b", 3, true);
  // Then the table holds thousands of ended first attempts (rows of intents
  // elsewhere: attempts checks no foreign key).
  backend->query("INSERT INTO attempts (intent_id, number, replica_id, state, finished_at) "
                 "SELECT -g, 1, 'replica-b', 'answered', now() FROM generate_series(1, 4000) g");
  auto const reads = "SELECT idx_scan || ' ' || idx_tup_read FROM pg_stat_user_indexes "
                     "WHERE indexrelname = 'attempts_pkey'";
  REQUIRE(backend->query(reads) == "0 0\n");
  round("large-a", 20, false);
  round("large-b", 20, true);
  stores.clear();  // the session ends: its statistics reach the shared counters
  // Every outcome probes the key at least once (its row's absence) by the
  // time the counts arrive.
  auto const counts = poll_until(*backend, reads, [](const std::string& now) { return std::stol(now) >= 46; });
  REQUIRE(std::stol(counts) >= 46);
  // About one entry an outcome at most (none is there to find); the
  // anti-join read about 4,000 for each.
  CHECK(std::stol(counts.substr(counts.find(' ') + 1)) < 200);
  CHECK(backend->query("SELECT count(*) FROM attempts WHERE intent_id > 0 AND number = 1") == "46\n");
}

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

// Two rounds of outcomes that share intents (two replicas, or a process and
// the one that took over its leases) must lock them in one order, or each
// can come to hold what the other waits for. A round locks its intents in
// id order, whatever order its outcomes came in (the store sorts them; the
// outcome function locks them in that order before it updates them). Seen
// from outside: with one intent held by another transaction, the round
// waits there, holding every intent below it and none above it.
TEST_CASE("postgresql: a round of outcomes locks its intents in id order, whatever order they came in" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  auto stores = sessions(*backend);
  auto& store = *stores.at(0);
  auto& holder = *stores.at(1);
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 6; ++i) {
    auto fp = "order-" + std::to_string(i);
    auto request = reserve_request(fp, "key-" + fp);
    request.start = ReserveRequest::Start{Millis(60000), "replica-a"};
    auto r = store.reserve_intents({&request, 1}).front();
    REQUIRE_MESSAGE(r.has_value(), r.error().message());
    ids.push_back(r->intent.id);
  }
  auto const middle = ids[2];
  // Highest id first: the order a round must not lock in.
  std::vector<Outcome> round;
  for (auto id = ids.rbegin(); id != ids.rend(); ++id) round.push_back(completed(*id, 1));

  // Another session settles the middle intent and keeps its transaction
  // open (and the row locked) until told to commit.
  HeldBatch holding(holder, [&] { (void)holder.record_outcome(completed(middle, 1)); });
  std::vector<Result<Intent>> settled;
  std::thread settling([&] { settled = store.record_outcomes(round); });
  auto const waiting = lock_waits(*backend, "1\n");
  auto const free_ids = free_intents(*backend);
  holding.release();
  settling.join();

  CHECK(waiting == "1\n");
  CHECK(free_ids == std::to_string(ids[3]) + "," + std::to_string(ids[4]) + "," + std::to_string(ids[5]) + "\n");
  // The middle one was settled by the holder first; the round settles the rest.
  REQUIRE(settled.size() == round.size());
  for (std::size_t i = 0; i < round.size(); ++i) {
    CAPTURE(round[i].intent_id);
    CHECK(settled[i].has_value() == (round[i].intent_id != middle));
  }
  CHECK(backend->query("SELECT count(*) FROM intents WHERE state = 'completed'") == "6\n");
}

// The lease sweep reads the time it may reach (its horizon) with the lease
// lock held exclusively; an admission holds it shared until it commits. So
// a first attempt whose admission is still open (its row not visible yet,
// its lease perhaps over already) is never passed over: the sweep waits for
// the lock, and after lock_timeout leaves its horizon where it was. Once
// the admission commits, the next sweep recovers the attempt. Without the
// lock on either side the first sweep would move its horizon past that
// lease, and no later sweep would look at it again.
TEST_CASE("postgresql: the lease sweep never passes a first attempt whose admission is still open" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  auto stores = sessions(*backend);
  auto& sweeper = *stores.at(0);
  auto& admitter = *stores.at(1);
  std::int64_t id = 0;
  HeldBatch admitting(admitter, [&] {
    auto request = reserve_request("fp-open", "key-fp-open");
    request.start = ReserveRequest::Start{Millis(0), "replica-a"};  // over once committed
    auto r = admitter.reserve_intents({&request, 1}).front();
    if (r && r->started) id = r->intent.id;
  });
  auto const swept = sweeper.recover_expired();
  auto const horizon = backend->query("SELECT horizon FROM lease_sweep");
  admitting.release();
  REQUIRE(id > 0);
  REQUIRE_MESSAGE(swept.has_value(), swept.error().message());
  CHECK(*swept == 0);
  CHECK(horizon == "-infinity\n");
  auto const again = sweeper.recover_expired();
  REQUIRE_MESSAGE(again.has_value(), again.error().message());
  CHECK(*again == 1);
  CHECK(sweeper.find_intent(id)->state == IntentState::unknown);
  CHECK(backend->query("SELECT number || ' ' || replica_id || ' ' || state || ' ' || recovered FROM attempts "
                       "WHERE intent_id = " + std::to_string(id)) == "1 replica-a unknown true\n");
  CHECK(backend->query("SELECT horizon > now() - interval '1 minute' FROM lease_sweep") == "t\n");
}

// An answer that lands while the lease sweep is turning its attempt unknown
// (the attempt's lease over, its answer late) still settles it, as it would
// an attempt recovered earlier: the sweep holds the intent locked with the
// attempt's row written, the outcome's statement waits for the intent and,
// once the sweep has committed, finds the row its snapshot did not show.
// Here the sweep is held mid-way by a second expired attempt whose own
// answer is in a transaction kept open.
TEST_CASE("postgresql: an answer landing while the lease sweep recovers its attempt still settles it" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  auto stores = sessions(*backend, 3);
  auto& sweeper = *stores.at(0);
  auto& holder = *stores.at(1);
  auto& recorder = *stores.at(2);
  // x: a first attempt begun with its reservation; y: one begun apart. Both
  // leases are over at once.
  auto request = reserve_request("fp-x", "key-fp-x");
  request.start = ReserveRequest::Start{Millis(0), "replica-a"};
  auto x = recorder.reserve_intents({&request, 1}).front();
  REQUIRE_MESSAGE(x.has_value(), x.error().message());
  REQUIRE(x->started);
  auto const y = reserve(recorder, "fp-y");
  auto begun = recorder.begin_attempt(AttemptRequest{y, IntentState::reserved, 0, 3, Millis(0)}, "replica-a");
  REQUIRE(begun.has_value());
  REQUIRE(begun->outcome == AttemptOutcome::started);
  // y's answer, its transaction open: the sweep waits for y, with x locked
  // and its row written...
  HeldBatch holding(holder, [&] { (void)holder.record_outcome(completed(y, 1)); });
  Result<int> swept = 0;
  std::thread sweeping([&] { swept = sweeper.recover_expired(); });
  auto const sweep_waits = lock_waits(*backend, "1\n");
  // ...and x's answer waits for the sweep.
  Result<Intent> answered = errc::storage_failure;
  std::thread answering([&] { answered = recorder.record_outcome(completed(x->intent.id, 1)); });
  auto const both_wait = lock_waits(*backend, "2\n");
  holding.release();
  sweeping.join();
  answering.join();
  CHECK(sweep_waits == "1\n");
  CHECK(both_wait == "2\n");
  REQUIRE_MESSAGE(swept.has_value(), swept.error().message());
  CHECK(*swept == 1);
  REQUIRE_MESSAGE(answered.has_value(), answered.error().message());
  CHECK(answered->state == IntentState::completed);
  CHECK(backend->query("SELECT number || ' ' || state || ' ' || answer_class || ' ' || recovered FROM attempts "
                       "WHERE intent_id = " + std::to_string(x->intent.id)) == "1 answered ok true\n");
}

// The lease sweep locks every intent it will recover in id order before it
// writes anything, as a round of outcomes does: the first attempts it finds
// by their lease and the intents of the attempts begun apart alike. Seen
// from outside: with a lower intent held by another transaction (its late
// answer), the sweep waits there holding nothing above it, where locking
// its first attempts first would hold one that a round settling both could
// be waiting for.
TEST_CASE("postgresql: the lease sweep locks what it recovers in id order, as outcomes do" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  auto stores = sessions(*backend, 3);
  auto& sweeper = *stores.at(0);
  auto& holder = *stores.at(1);
  auto& store = *stores.at(2);
  // a: an attempt begun apart; b, above it: a first attempt begun with its
  // reservation. Both leases are over at once.
  auto const a = reserve(store, "fp-a");
  auto begun = store.begin_attempt(AttemptRequest{a, IntentState::reserved, 0, 3, Millis(0)}, "replica-a");
  REQUIRE(begun.has_value());
  REQUIRE(begun->outcome == AttemptOutcome::started);
  auto request = reserve_request("fp-b", "key-fp-b");
  request.start = ReserveRequest::Start{Millis(0), "replica-a"};
  auto b = store.reserve_intents({&request, 1}).front();
  REQUIRE_MESSAGE(b.has_value(), b.error().message());
  REQUIRE(b->started);
  REQUIRE(a < b->intent.id);
  HeldBatch holding(holder, [&] { (void)holder.record_outcome(completed(a, 1)); });
  Result<int> swept = 0;
  std::thread sweeping([&] { swept = sweeper.recover_expired(); });
  auto const waiting = lock_waits(*backend, "1\n");
  auto const free_ids = free_intents(*backend);
  holding.release();
  sweeping.join();
  CHECK(waiting == "1\n");
  CHECK(free_ids == std::to_string(b->intent.id) + "\n");
  REQUIRE_MESSAGE(swept.has_value(), swept.error().message());
  CHECK(*swept == 1);
  CHECK(sweeper.find_intent(a)->state == IntentState::completed);
  CHECK(sweeper.find_intent(b->intent.id)->state == IntentState::unknown);
}

// The server's clock gone back behind the stored horizon (a step back, a
// standby whose clock is behind): the leases set since may end before the
// horizon, and the sweep still finds them. Seen here as a horizon an hour
// ahead of the clock: a process that swept before looks back from its new
// horizon as far as the time since its last sweep, one that never swept
// looks at every lease; then the horizon follows the clock back.
TEST_CASE("postgresql: the lease sweep finds first attempts after the server's clock went back" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  auto stores = sessions(*backend);
  auto& swept_before = *stores.at(0);
  auto& fresh = *stores.at(1);
  auto dispatch = [&](const std::string& fp) {
    auto request = reserve_request(fp, "key-" + fp);
    request.start = ReserveRequest::Start{Millis(0), "replica-a"};
    auto r = swept_before.reserve_intents({&request, 1}).front();
    REQUIRE_MESSAGE(r.has_value(), r.error().message());
    REQUIRE(r->started);
    return r->intent.id;
  };
  REQUIRE(swept_before.recover_expired().has_value());
  // With the horizon an hour ahead, an attempt dispatched now is found by
  // `sweeper`'s next sweep, which moves the horizon back to the clock.
  auto const found_after_going_back = [&](Store& sweeper, const std::string& fp) {
    backend->query("UPDATE lease_sweep SET horizon = now() + interval '1 hour'");
    auto const id = dispatch(fp);
    auto const swept = sweeper.recover_expired();
    REQUIRE_MESSAGE(swept.has_value(), swept.error().message());
    CHECK(*swept == 1);
    CHECK(sweeper.find_intent(id)->state == IntentState::unknown);
    CHECK(backend->query("SELECT horizon < now() + interval '1 minute' FROM lease_sweep") == "t\n");
  };
  found_after_going_back(swept_before, "fp-back-1");
  found_after_going_back(fresh, "fp-back-2");
  CHECK(backend->query("SELECT count(*) FROM attempts WHERE state = 'unknown' AND recovered") == "2\n");
}

// The outcome functions' planner settings are their own (SET clauses): they
// end with the call, and the caller's next statement in the same transaction
// plans as before. Their defer argument (an outcome recorded after its
// answer) turns synchronous_commit off for the rest of that transaction, and
// without it the commit still waits for the disk: in the function that
// settles (idemgate_settle_outcomes, the ids alone) and in the one that also
// reads the settled intents back, which calls it.
TEST_CASE("postgresql: the outcome functions' settings end with them; defer alone skips the flush" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  REQUIRE(migrate(backend->config).has_value());
  auto call = [&](bool settle_only, const char* defer) {
    std::string const args = std::string("'{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', "
                                         "'{}', '{}', '{}', '{}', ") + defer;
    std::string const count = settle_only ? "cardinality(idemgate_settle_outcomes(" + args + "))"
                                          : "count(*) FROM idemgate_record_outcomes(" + args + ")";
    // One transaction (psql sends the statements as one query string).
    return backend->query("SELECT " + count + "; SHOW synchronous_commit; SHOW enable_hashjoin; "
                          "SHOW enable_seqscan; SHOW plan_cache_mode");
  };
  for (bool settle_only : {false, true}) {
    CAPTURE(settle_only);
    CHECK(call(settle_only, "true") == "0\noff\non\non\nauto\n");
    CHECK(call(settle_only, "false") == "0\non\non\non\nauto\n");
  }
}

// Schema version 9 dropped the foreign key from attempts to intents: its
// check was a query of its own for every attempt. What it guarded holds by
// construction: each way the ledger writes an attempt (a batch's
// reservation with its first attempt, a lone admission, an attempt begun
// alone or with others) writes it beside the intent it locks, and an
// attempt asked for an intent that does not exist is refused with nothing
// written.
TEST_CASE("postgresql: attempts check no foreign key, and every attempt the ledger writes has its intent" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  REQUIRE(migrate(backend->config).has_value());
  CHECK(backend->query("SELECT count(*) FROM pg_constraint WHERE conrelid = 'attempts'::regclass AND contype = 'f'") ==
        "0\n");
  auto stores = open_stores(backend->config);
  REQUIRE_MESSAGE(stores.has_value(), stores.error().message());
  auto& store = *stores->front();
  // A batch's reservation with its first attempt begun.
  auto batched = reserve_request("fk-batch", "key-fk-batch");
  batched.start = ReserveRequest::Start{Millis(60000), "replica-a"};
  auto a = store.reserve_intents({&batched, 1}).front();
  REQUIRE_MESSAGE(a.has_value(), a.error().message());
  REQUIRE(a->started);
  // A lone admission.
  auto alone = store.admit_alone(AdmitRequest{reserve_request("fk-alone", "key-fk-alone"), 100000,
                                              FirstAttempt{3, Millis(60000), "replica-a"}});
  REQUIRE(alone.has_value());
  REQUIRE_MESSAGE(alone->has_value(), alone->error().message());
  REQUIRE((*alone)->start.has_value());
  // An attempt begun alone, then a second one after a retryable answer,
  // begun with another intent's first.
  auto plain = reserve_request("fk-plain", "key-fk-plain");
  auto c = store.reserve_intents({&plain, 1}).front();
  REQUIRE(c.has_value());
  REQUIRE(store.begin_attempt(attempt_now(store, c->intent.id), "replica-a").has_value());
  Outcome retry;
  retry.intent_id = c->intent.id;
  retry.attempt = 1;
  retry.state = IntentState::retryable;
  retry.answer_class = "rate_limited";
  REQUIRE(store.record_outcome(retry).has_value());
  auto other = reserve_request("fk-other", "key-fk-other");
  auto d = store.reserve_intents({&other, 1}).front();
  REQUIRE(d.has_value());
  std::vector<AttemptRequest> both{attempt_now(store, c->intent.id), attempt_now(store, d->intent.id)};
  for (auto& started : store.begin_attempts(both, "replica-a")) {
    REQUIRE_MESSAGE(started.has_value(), started.error().message());
    CHECK(started->outcome == AttemptOutcome::started);
  }
  // No such intent: refused, nothing written.
  auto missing = store.begin_attempt(AttemptRequest{99999999, IntentState::reserved, 0, 3, std::chrono::minutes(1)},
                                     "replica-a");
  CHECK(missing.has_error());
  // The first attempts begun with their reservations live on their intents
  // until they end; their outcomes write their rows.
  CHECK(backend->query("SELECT count(*) FROM attempts") == "3\n");
  for (auto id : {a->intent.id, (*alone)->reservation.intent.id})
    REQUIRE(store.record_outcome(completed(id, 1)).has_value());
  CHECK(backend->query("SELECT count(*) FROM attempts") == "5\n");
  CHECK(backend->query("SELECT count(*) FROM attempts WHERE intent_id NOT IN (SELECT id FROM intents)") == "0\n");
  CHECK(backend->query("SELECT string_agg(intent_id || ':' || number, ',' ORDER BY intent_id, number) FROM attempts") ==
        std::to_string(a->intent.id) + ":1," + std::to_string((*alone)->reservation.intent.id) + ":1," +
            std::to_string(c->intent.id) + ":1," + std::to_string(c->intent.id) + ":2," +
            std::to_string(d->intent.id) + ":1\n");
}
