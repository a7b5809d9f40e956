// Group commit on a real database: Store::batch() runs many calls in one
// transaction, each in a savepoint, so a failing call changes nothing and the
// others are durable; a connection lost mid-batch fails the whole batch; and
// many concurrent callers through the Ledger get correct results from fewer
// commits than calls.
#include "backend.hpp"

#include "ledger/open_store.hpp"
#include "ledger/executor.hpp"

#include <chrono>
#include <set>

using idemgate::Task;

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;
using namespace std::chrono_literals;

LEDGER_CONFORMANCE(batch_isolates_failures,
                   "a failing call in a batch changes nothing, the others are durable") {
  REQUIRE(migrate(backend.config).has_value());
  std::int64_t a = 0, b = 0, c = 0, escalation = 0;
  {
    auto store = open_store(backend);
    a = reserve(*store, "fp-a");
    b = reserve(*store, "fp-b");
    c = reserve(*store, "fp-c");
    REQUIRE(store->begin_attempt(attempt_now(*store, a), "replica-a").has_value());
    REQUIRE(store->begin_attempt(attempt_now(*store, b), "replica-a").has_value());
    REQUIRE(store->record_outcome(completed(b, 1)).has_value());
    // An open escalation on b (completed): denying it writes the escalation,
    // then fails to settle the completed intent (illegal_transition).
    EscalationRequest er;
    er.run = "run-1";
    er.intent_id = b;
    er.reason_code = "tool_outcome_unknown";
    er.package_json = "{}";
    escalation = store->persist_escalation(er).value();

    Result<Intent> settle_a = boost::system::error_code(errc::invalid_argument);
    Result<Intent> settle_c = settle_a;
    Result<RunCharge> charge = boost::system::error_code(errc::invalid_argument);
    Result<Run> missing_run = boost::system::error_code(errc::invalid_argument);
    Result<Escalation> deny = missing_run.error();
    Result<std::int64_t> dangling = missing_run.error(), kept = missing_run.error();
    Result<std::int64_t> counted = missing_run.error();
    Result<AttemptStart> begin_c = missing_run.error();
    auto failed = store->batch([&] {
      charge = store->count_call("run-1", 10, CallKind::write);
      settle_a = store->record_outcome(completed(a, 1));
      // No attempt of c was begun: illegal, nothing written.
      settle_c = store->record_outcome(completed(c, 1));
      missing_run = store->set_run_state("no-such-run", RunState::frozen, "x");
      ResolveRequest rr;
      rr.escalation_id = escalation;
      rr.resolution = Resolution::deny;
      rr.note = "must not stick";
      deny = store->resolve_escalation(rr);
      // A foreign key violation: an SQL error, which in PostgreSQL aborts
      // the transaction unless the call is in a savepoint of its own.
      EscalationRequest bad;
      bad.run = "run-1";
      bad.intent_id = 99999999;
      bad.reason_code = "x";
      bad.package_json = "{}";
      dangling = store->persist_escalation(bad);
      EscalationRequest good = bad;
      good.intent_id = a;
      kept = store->persist_escalation(good);
      counted = store->count_intents("run-1", "stripe.create_charge", "ok", 0);
      begin_c = store->begin_attempt(AttemptRequest{c, IntentState::reserved, 0, 3, std::chrono::minutes(1)}, "replica-a");
    });
    REQUIRE_MESSAGE(!failed, failed.message());
    REQUIRE(charge.has_value());
    CHECK(charge->outcome == ChargeOutcome::counted);
    REQUIRE(settle_a.has_value());
    CHECK(settle_a->state == IntentState::completed);
    CHECK(settle_c.error() == errc::illegal_transition);
    CHECK(missing_run.error() == errc::not_found);
    CHECK(deny.error() == errc::illegal_transition);
    CHECK(dangling.has_error());
    CHECK(kept.has_value());
    // The batch sees its own writes: a and b are completed.
    CHECK(counted.value() == 2);
    REQUIRE(begin_c.has_value());
    CHECK(begin_c->outcome == AttemptOutcome::started);
  }

  // Reopened (a new connection): what succeeded is there, the failures left
  // nothing behind.
  auto store = open_store(backend);
  CHECK(store->find_intent(a)->state == IntentState::completed);
  CHECK(store->find_intent(a)->receipt == "r-" + std::to_string(a));
  CHECK(store->find_intent(b)->state == IntentState::completed);
  auto intent_c = store->find_intent(c);
  CHECK(intent_c->state == IntentState::dispatched);
  CHECK(intent_c->attempts == 1);
  CHECK(store->find_run("run-1")->calls == 1);
  CHECK(store->find_run("no-such-run").error() == errc::not_found);
  auto e = store->find_escalation(escalation);
  CHECK(e->state == EscalationState::open);
  CHECK(e->note.empty());
  CHECK(backend.query("SELECT count(*) FROM escalations") == "2\n");
  CHECK(backend.query("SELECT count(*) FROM attempts WHERE intent_id = " + std::to_string(c) +
                      " AND state = 'dispatched'") == "1\n");
  CHECK(store->count_intents("run-1", "stripe.create_charge", "ok", a).value() == 1);
  CHECK(store->count_intents("run-1", "other.tool", "ok", 0).value() == 0);
}

LEDGER_CONFORMANCE(batch_together_fails_whole,
                   "a batch of one caller's calls (Calls::together) writes nothing when one of them fails") {
  REQUIRE(migrate(backend.config).has_value());
  auto store = open_store(backend);
  Result<Reservation> reserved = boost::system::error_code(errc::invalid_argument);
  Result<Intent> missing = boost::system::error_code(errc::invalid_argument);
  Result<RunCharge> after = boost::system::error_code(errc::invalid_argument);
  auto failed = store->batch(
      [&] {
        auto request = reserve_request("t-a", "key-t-a");
        reserved = std::move(store->reserve_intents({&request, 1}).front());
        missing = store->record_outcome(completed(99999999, 1));
        after = store->count_call("run-t", 10, CallKind::write);
      },
      Store::Calls::together);
  CHECK(failed == errc::not_found);
  CHECK(reserved.has_value());  // its own result, discarded with the batch
  CHECK(missing.error() == errc::not_found);
  CHECK(after.error() == errc::not_found);  // not run: the batch had failed
  CHECK(backend.query("SELECT count(*) FROM intents") == "0\n");
  CHECK(backend.query("SELECT count(*) FROM runs") == "0\n");
  // The same calls, all succeeding, commit together.
  failed = store->batch(
      [&] {
        auto request = reserve_request("t-a", "key-t-a");
        reserved = std::move(store->reserve_intents({&request, 1}).front());
        after = store->count_call("run-t", 10, CallKind::write);
      },
      Store::Calls::together);
  CHECK(!failed);
  CHECK(reserved->outcome == ReserveOutcome::reserved);
  CHECK(backend.query("SELECT count(*) FROM intents") == "1\n");
}

TEST_CASE("postgresql: a connection lost mid-batch fails the whole batch with unavailable" *
          doctest::test_suite("db")) {
  auto backend = postgresql_backend();
  REQUIRE(migrate(backend->config).has_value());
  auto store = open_store(*backend);
  auto a = reserve(*store, "fp-a");
  auto b = reserve(*store, "fp-b");
  REQUIRE(store->begin_attempt(attempt_now(*store, a), "replica-a").has_value());
  REQUIRE(store->begin_attempt(attempt_now(*store, b), "replica-a").has_value());

  Result<Intent> first = boost::system::error_code(errc::invalid_argument);
  Result<Intent> second = first, third = first;
  auto failed = store->batch([&] {
    first = store->record_outcome(completed(a, 1));
    // The server ends this session (as a restart or an admin would).
    backend->query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                   "current_database() AND pid <> pg_backend_pid()");
    // Wait until the signalled backend has exited.
    for (auto until = std::chrono::steady_clock::now() + 10s;
         backend->query("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                        "current_database() AND pid <> pg_backend_pid()") != "0\n" &&
         std::chrono::steady_clock::now() < until;)
      std::this_thread::sleep_for(20ms);
    second = store->record_outcome(completed(b, 1));
    third = store->find_intent(b);
  });
  CHECK(failed == errc::unavailable);
  CHECK(first.has_value());  // its own result, discarded with the batch
  CHECK(second.error() == errc::unavailable);
  CHECK(third.error() == errc::unavailable);
  CHECK(backend->query("SELECT count(*) FROM intents WHERE state = 'completed'") == "0\n");
  // The same store reconnects for the next call (after its backoff).
  Result<Intent> again = boost::system::error_code(errc::unavailable);
  for (auto until = std::chrono::steady_clock::now() + 10s;
       !again && std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(20ms))
    again = store->record_outcome(completed(a, 1));
  REQUIRE_MESSAGE(again.has_value(), again.error().message());
  CHECK(again->state == IntentState::completed);
}

namespace {

struct Flow {
  Result<RunCharge> charge = boost::system::error_code(errc::invalid_argument);
  Result<Reservation> reservation = boost::system::error_code(errc::invalid_argument);
  Result<AttemptStart> attempt = boost::system::error_code(errc::invalid_argument);
  std::optional<Result<Intent>> outcome;
};

// One guarded write as the proxy makes it, each call awaited before the next.
Task<Flow> guarded_write(Ledger& ledger, std::string fp, std::string key) {
  Flow flow;
  std::string run = "run-1";
  flow.charge = co_await ledger.count_call(run, 100000, CallKind::write);
  if (!flow.charge) co_return flow;
  auto request = reserve_request(fp, key);
  RequestSnapshot snapshot;
  flow.reservation = co_await ledger.reserve_intent(std::move(request), std::move(snapshot));
  if (!flow.reservation) co_return flow;
  auto id = flow.reservation->intent.id;
  flow.attempt = co_await ledger.begin_attempt(AttemptRequest{id, IntentState::reserved, 0, 3, std::chrono::minutes(1)});
  if (!flow.attempt || flow.attempt->outcome != AttemptOutcome::started) co_return flow;
  auto outcome = completed(id, flow.attempt->attempt);
  flow.outcome = co_await ledger.record_outcome(std::move(outcome));
  co_return flow;
}

// Every stride-th caller (the first `shared` of them) races on one fingerprint.
bool is_shared(int i, int total, int shared) {
  int stride = total / shared;
  return i % stride == 0 && i / stride < shared;
}

struct Tally {
  int own_completed = 0;
  int shared_reserved = 0;
  int shared_started = 0;
  std::set<std::int64_t> shared_ids;
};

Tally run_flows(Ledger& ledger, int own, int shared, const std::string& tag) {
  std::vector<Task<Flow>> ops;
  for (int i = 0; i < own + shared; ++i) {
    bool mine = !is_shared(i, own + shared, shared);
    ops.push_back(guarded_write(ledger, mine ? tag + "-fp-" + std::to_string(i) : tag + "-shared",
                                tag + "-key-" + std::to_string(i)));
  }
  Tally tally;
  int index = 0;
  for (auto& flow : run_all(std::move(ops), 2)) {
    bool mine = !is_shared(index++, own + shared, shared);
    REQUIRE_MESSAGE(flow.charge.has_value(), flow.charge.error().message());
    CHECK(flow.charge->outcome == ChargeOutcome::counted);
    REQUIRE_MESSAGE(flow.reservation.has_value(), flow.reservation.error().message());
    REQUIRE_MESSAGE(flow.attempt.has_value(), flow.attempt.error().message());
    if (mine) {
      CHECK(flow.reservation->outcome == ReserveOutcome::reserved);
      CHECK(flow.attempt->outcome == AttemptOutcome::started);
      REQUIRE(flow.outcome.has_value());
      REQUIRE_MESSAGE(flow.outcome->has_value(), flow.outcome->error().message());
      CHECK((*flow.outcome)->state == IntentState::completed);
      ++tally.own_completed;
      continue;
    }
    tally.shared_ids.insert(flow.reservation->intent.id);
    if (flow.reservation->outcome == ReserveOutcome::reserved) ++tally.shared_reserved;
    else CHECK(flow.reservation->outcome == ReserveOutcome::existing);
    if (flow.attempt->outcome == AttemptOutcome::started) {
      ++tally.shared_started;
      REQUIRE(flow.outcome.has_value());
      CHECK(flow.outcome->has_value());
    } else {
      // Decided from "reserved": the winner's attempt moved it (in flight,
      // or already settled), so this caller decides again.
      CHECK(flow.attempt->outcome == AttemptOutcome::changed);
      CHECK((flow.attempt->intent.state == IntentState::dispatched ||
             flow.attempt->intent.state == IntentState::completed));
    }
  }
  return tally;
}

}  // namespace

LEDGER_CONFORMANCE(mixed_concurrent_calls,
                   "64 concurrent guarded writes plus 16 racing on one fingerprint: group commit") {
  auto ledger = open_ledger(backend);
  auto started = std::chrono::steady_clock::now();
  auto tally = run_flows(*ledger, 64, 16, "g");
  auto elapsed = std::chrono::steady_clock::now() - started;
  CHECK(tally.own_completed == 64);
  CHECK(tally.shared_reserved == 1);  // exactly one winner
  CHECK(tally.shared_started == 1);   // and one started attempt
  CHECK(tally.shared_ids.size() == 1);

  auto batches = ledger->stats().batches.load();
  auto jobs = ledger->stats().batched_jobs.load();
  CHECK(jobs >= 80 * 3);
  CHECK(batches < jobs);  // fewer durable commits than calls
  CHECK(run(ledger->find_run("run-1"))->calls == 80);
  CHECK(run(ledger->count_intents("run-1", "stripe.create_charge", "ok")).value() == 65);
  CHECK(backend.query("SELECT count(*) FROM attempts") == "65\n");
  MESSAGE(backend.name() << ": 80 guarded writes, " << jobs << " calls in " << batches
                         << " transactions (" << double(jobs) / double(batches)
                         << " per commit), "
                         << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
                         << " ms");
}

// Not a timed assertion (benchmarks measure targets): the same workload with
// batching off and on, for the test log.
LEDGER_CONFORMANCE(batching_compared, "the same guarded writes with max_batch 1 and 64") {
  REQUIRE(migrate(backend.config).has_value());
  for (std::size_t max_batch : {std::size_t{1}, std::size_t{64}}) {
    auto stores = open_stores(backend.config);
    REQUIRE(stores.has_value());
    LedgerOptions options;
    options.max_batch = max_batch;
    Ledger ledger(std::move(*stores), options);
    auto tag = "m" + std::to_string(max_batch);
    auto started = std::chrono::steady_clock::now();
    auto tally = run_flows(ledger, 112, 16, tag);
    auto elapsed = std::chrono::steady_clock::now() - started;
    CHECK(tally.own_completed == 112);
    CHECK(tally.shared_reserved == 1);
    CHECK(tally.shared_started == 1);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count();
    MESSAGE(backend.name() << ": max_batch " << max_batch << ": 128 guarded writes ("
                           << ledger.stats().batched_jobs.load() << " calls) in "
                           << ledger.stats().batches.load() << " transactions, " << ms
                           << " ms, " << (ms ? 128 * 1000 / ms : 0) << " writes/s");
  }
}

// The batched reservations and charges pass their values as array elements
// (in PostgreSQL's binary array format): whatever a text form would have to
// escape (quotes, backslashes, braces, commas, the word NULL, empty strings,
// non-ASCII) is stored exactly as given, and so are numbers past 32 bits
// (each int8 element written as two 32-bit halves).
LEDGER_CONFORMANCE(batch_values_verbatim, "batched reservations and charges store awkward values verbatim") {
  REQUIRE(migrate(backend.config).has_value());
  auto store = open_store(backend);
  std::string const odd = "a\\b\"c{d},e NULL '' \xc3\xa9";
  std::vector<ReserveRequest> requests;
  requests.push_back(reserve_request("fp-" + odd, "key-" + odd, "run-" + odd));
  requests.back().scope = "scope-" + odd;
  requests.back().request_snapshot = "{\"body\":\"" + odd + "\"}";
  requests.push_back(reserve_request("", "key-empty-fp", "run-2"));  // refused: no fingerprint
  requests.push_back(reserve_request("fp-plain", "key-plain", "NULL"));
  requests.back().request_snapshot = "{\"plain\":true}";
  // 60 and 70 days in ms: past 2^32, with a low half of its own.
  auto const wide_window = Millis(5'184'000'123), wide_ttl = Millis(6'048'000'321);
  requests.back().window = wide_window;
  requests.back().unknown_ttl = wide_ttl;
  std::int64_t const wide_budget = 5'000'000'007;
  std::vector<ChargeRequest> charges{{"run-" + odd, 5, CallKind::write}, {"NULL", wide_budget, CallKind::write},
                                     {"run-" + odd, 5, CallKind::read}};
  std::vector<Result<Reservation>> reserved;
  std::vector<Result<RunCharge>> charged;
  auto failed = store->batch([&] {
    charged = store->count_calls(charges);
    reserved = store->reserve_intents(requests);
  });
  REQUIRE_MESSAGE(!failed, failed.message());
  REQUIRE(reserved.size() == 3);
  REQUIRE(reserved[0].has_value());
  CHECK(reserved[1].error() == errc::invalid_argument);
  REQUIRE(reserved[2].has_value());
  // The reservation carries the snapshot it stored (PostgreSQL does not
  // send it back: the request had it).
  CHECK(reserved[0]->intent.request_snapshot == "{\"body\":\"" + odd + "\"}");
  CHECK(reserved[2]->intent.request_snapshot == "{\"plain\":true}");
  auto again = open_store(backend);
  auto first = again->find_intent(reserved[0]->intent.id);
  REQUIRE(first.has_value());
  CHECK(first->fingerprint == "fp-" + odd);
  CHECK(first->key == "key-" + odd);
  CHECK(first->run == "run-" + odd);
  CHECK(first->scope == "scope-" + odd);
  CHECK(first->request_snapshot == "{\"body\":\"" + odd + "\"}");
  auto plain = again->find_intent(reserved[2]->intent.id);
  REQUIRE(plain.has_value());
  CHECK(plain->run == "NULL");
  CHECK(plain->window == wide_window);
  CHECK(plain->unknown_ttl == wide_ttl);
  CHECK(plain->window_until - plain->created_at == wide_window);
  REQUIRE(charged.size() == 3);
  for (auto& c : charged) CHECK(c.has_value());
  CHECK(again->find_run("run-" + odd)->calls == 2);
  CHECK(again->find_run("NULL")->calls == 1);
  CHECK(again->find_run("NULL")->budget == wide_budget);
}

TEST_CASE("postgresql: a reservation the server refuses fails in its savepoint, the batch's other calls commit" *
          doctest::test_suite("db")) {
  auto backend = postgresql_backend();
  REQUIRE(migrate(backend->config).has_value());
  auto store = open_store(*backend);
  // Its first statement is a prepared one: its savepoint must be made
  // before it runs, or its failure aborts the whole batch.
  auto bad = reserve_request("fp-bad", "key-bad");
  bad.request_snapshot = "\xff\xfe not UTF-8";
  Result<Reservation> refused = boost::system::error_code(errc::invalid_argument);
  Result<RunCharge> charge = boost::system::error_code(errc::invalid_argument);
  Result<Reservation> good = boost::system::error_code(errc::invalid_argument);
  auto failed = store->batch([&] {
    refused = std::move(store->reserve_intents({&bad, 1}).front());
    charge = store->count_call("run-1", 10, CallKind::write);
    auto fine = reserve_request("fp-good", "key-good");
    good = std::move(store->reserve_intents({&fine, 1}).front());
  });
  REQUIRE_MESSAGE(!failed, failed.message());
  CHECK(refused.error() == errc::storage_failure);
  CHECK(charge.has_value());
  CHECK(good.has_value());
  CHECK(backend->query("SELECT string_agg(fingerprint, ',') FROM intents") == "fp-good\n");
  CHECK(backend->query("SELECT calls FROM runs WHERE run_id = 'run-1'") == "1\n");
}
