// How PostgreSQL executes the write path's statements, checked through the
// server's own statistics (pg_stat_user_tables) after the store's session
// has ended and flushed them: an outcome is a HOT update, and no statement
// of the write path scans a whole table, however small the ledger was when
// its plan was made; a round of outcomes locks in id order; the outcome
// functions' settings end with them; attempts need no foreign key.
#include "pg_sessions.hpp"

#include <string>
#include <thread>
#include <vector>

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

// PostgreSQL rewrites a row in place (HOT: no index entry written) only when
// no indexed column changed, predicates included. An outcome changes the
// intent's state, which no index of intents may depend on, or each outcome
// writes an entry into every one of them; it keeps the intent's lease,
// which intents_lease_end indexes. And a first attempt begun with its
// reservation writes its attempts row only if it ends unknown (one insert,
// no update); answered, it stays on its intent (schema version 12).
TEST_CASE("postgresql: an outcome rewrites its intent in place (a HOT update)" * doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  REQUIRE(migrate(backend->config).has_value());
  {
    auto stores = open_stores(backend->config);
    REQUIRE_MESSAGE(stores.has_value(), stores.error().message());
    auto& store = *stores->front();
    for (const std::string fp : {"fp-1", "fp-2", "fp-3", "fp-4"}) {
      auto r = reserve_started(store, fp);
      REQUIRE(r.started);
      auto outcome = completed(r.intent.id, 1);
      if (fp == "fp-4") {
        outcome.state = IntentState::unknown;
        outcome.answer_class = "timeout";
        outcome.receipt.clear();
      }
      REQUIRE(store.record_outcome(outcome).has_value());
    }
  }  // the store's session ends: its statistics reach the shared counters
  // The answered ones in place (the unknown one sets unknown_since, which
  // intents_unknown indexes).
  CHECK(reaches(*backend, "SELECT n_tup_upd || ',' || n_tup_hot_upd FROM pg_stat_user_tables "
                          "WHERE relname = 'intents'", "4,3\n") == "4,3\n");
  // The unknown one's row alone: the answered ones stay on their intents.
  CHECK(reaches(*backend, "SELECT n_tup_ins || ',' || n_tup_upd FROM pg_stat_user_tables "
                          "WHERE relname = 'attempts'", "1,0\n") == "1,0\n");
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
        batch.push_back(completed(reserve_started(store, fp).intent.id, 1));
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

// An outcome that ends a first attempt begun with its reservation unknown
// writes the attempt's row unless one is there (a lease sweep wrote it;
// answered, since version 12, it writes none and looks for none). Version
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
      // Unknown: an answered first attempt writes no row and so looks for none.
      outcomes.push_back(completed(reserve_started(store, name + "-" + std::to_string(i)).intent.id, 1));
      outcomes.back().state = IntentState::unknown;
      outcomes.back().answer_class = "timeout";
      outcomes.back().receipt.clear();
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
    ids.push_back(reserve_started(store, "order-" + std::to_string(i)).intent.id);
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

// The outcome functions' planner settings are their own (SET clauses): they
// end with the call, and the caller's next statement in the same transaction
// plans as before. Their defer argument (an outcome recorded after its
// answer) turns synchronous_commit off for the rest of that transaction, and
// without it the commit still waits for the disk: in the function that
// settles (idemgate_settle_outcomes, the ids alone) and in the one that also
// reads the settled intents back, which calls it.
TEST_CASE("postgresql: the outcome functions' settings end with them, defer alone skips the flush" *
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
  // until they end, and answered they stay there (attempt_history).
  CHECK(backend->query("SELECT count(*) FROM attempts") == "3\n");
  for (auto id : {a->intent.id, (*alone)->reservation.intent.id})
    REQUIRE(store.record_outcome(completed(id, 1)).has_value());
  CHECK(backend->query("SELECT count(*) FROM attempts") == "3\n");
  CHECK(backend->query("SELECT count(*) FROM attempt_history WHERE intent_id NOT IN (SELECT id FROM intents)") ==
        "0\n");
  CHECK(backend->query("SELECT string_agg(intent_id || ':' || number, ',' ORDER BY intent_id, number) "
                       "FROM attempt_history") ==
        std::to_string(a->intent.id) + ":1," + std::to_string((*alone)->reservation.intent.id) + ":1," +
            std::to_string(c->intent.id) + ":1," + std::to_string(c->intent.id) + ":2," +
            std::to_string(d->intent.id) + ":1\n");
}
