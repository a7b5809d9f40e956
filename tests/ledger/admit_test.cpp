// A guarded write's way in as one ledger call (Ledger::admit): the run
// charge, the reservation and the first attempt in one transaction, many
// requests per durable commit; the first attempt only for the request's own
// reservation with a counted charge; and the batched forms of count_call and
// begin_attempt (Store::count_calls, Store::begin_attempts) agree with the
// single ones on both backends; every way of writing an attempt leaves it on
// an intent that counts it.
#include "backend.hpp"

#include "ledger/open_store.hpp"
#include "ledger/executor.hpp"

#include <chrono>
#include <set>

using idemgate::Task;

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;
using namespace std::chrono_literals;

namespace {


struct Admitted {
  Result<Admission> admission = boost::system::error_code(errc::invalid_argument);
  std::optional<Result<Intent>> outcome;
};

Task<Admitted> admit_and_settle(Ledger& ledger, AdmitRequest request) {
  Admitted out;
  RequestSnapshot snapshot;
  out.admission = co_await unboxed(ledger.admit(std::move(request), std::move(snapshot)));
  if (!out.admission || !out.admission->start || out.admission->start->outcome != AttemptOutcome::started)
    co_return out;
  auto outcome = completed(out.admission->reservation.intent.id, out.admission->start->attempt);
  out.outcome = co_await ledger.record_outcome(std::move(outcome));
  co_return out;
}

}  // namespace

LEDGER_CONFORMANCE(admit_one_commit, "admit: charge, reservation and first attempt in one commit") {
  auto ledger = open_ledger(backend);
  auto admitted = run(admit_and_settle(*ledger, admit_request("fp-1", "k-1")));
  REQUIRE_MESSAGE(admitted.admission.has_value(), admitted.admission.error().message());
  auto const& a = *admitted.admission;
  CHECK(a.charge.outcome == ChargeOutcome::counted);
  CHECK(a.charge.calls == 1);
  CHECK(a.reservation.outcome == ReserveOutcome::reserved);
  REQUIRE(a.start.has_value());
  CHECK(a.start->outcome == AttemptOutcome::started);
  CHECK(a.start->attempt == 1);
  CHECK(a.reservation.intent.state == IntentState::dispatched);
  CHECK(a.reservation.intent.lease_until.has_value());
  // The intent as stored, its request snapshot too (PostgreSQL's lone
  // admission does not read it back: it is the one the request gave).
  CHECK(a.reservation.intent.request_snapshot + "\n" ==
        backend.query("SELECT redacted_request FROM intents WHERE id = " + std::to_string(a.reservation.intent.id)));
  CHECK(!a.reservation.intent.request_snapshot.empty());
  // Since schema version 14 it is written to redacted_request alone.
  CHECK(backend.query("SELECT count(*) FROM intents WHERE request_snapshot <> ''") == "0\n");
  // One transaction for the admission, one for the outcome.
  CHECK(ledger->stats().batches == 2);
  // Answered, the first attempt stays on its intent (no attempts row);
  // attempt_history shows it.
  CHECK(backend.query("SELECT count(*) FROM attempts") == "0\n");
  CHECK(backend.query("SELECT replica_id FROM attempt_history") == "replica-a\n");
  CHECK(backend.query("SELECT state FROM attempt_history") == "answered\n");

  // The same payload again: the live intent, no charge-free start.
  RequestSnapshot snapshot;
  auto again = run(unboxed(ledger->admit(admit_request("fp-1", "k-2"), std::move(snapshot))));
  REQUIRE(again.has_value());
  CHECK(again->reservation.outcome == ReserveOutcome::existing);
  CHECK(again->reservation.intent.state == IntentState::completed);
  CHECK_FALSE(again->start.has_value());
  CHECK(again->charge.calls == 2);
  CHECK(backend.query("SELECT count(*) FROM attempt_history") == "1\n");
}

LEDGER_CONFORMANCE(admit_budget, "admit: no attempt begins past the run's budget or in a frozen run") {
  auto ledger = open_ledger(backend);
  for (int i = 0; i < 2; ++i) {
    RequestSnapshot snapshot;
    auto a = run(unboxed(ledger->admit(admit_request("b-" + std::to_string(i), "k-" + std::to_string(i), 2), std::move(snapshot))));
    REQUIRE(a.has_value());
    REQUIRE(a->start.has_value());
    CHECK(a->start->outcome == AttemptOutcome::started);
  }
  RequestSnapshot snapshot;
  auto over = run(unboxed(ledger->admit(admit_request("b-2", "k-2", 2), std::move(snapshot))));
  REQUIRE(over.has_value());
  CHECK(over->charge.outcome == ChargeOutcome::exhausted);
  CHECK(over->reservation.outcome == ReserveOutcome::reserved);  // reserved, never begun
  CHECK_FALSE(over->start.has_value());
  CHECK(over->reservation.intent.state == IntentState::reserved);

  REQUIRE(run(ledger->count_call("run-2", 10, CallKind::write)).has_value());
  REQUIRE(run(ledger->freeze_run("run-2", "test")).has_value());
  RequestSnapshot snapshot2;
  auto frozen = run(unboxed(ledger->admit(admit_request("f-1", "kf-1", 10, "run-2"), std::move(snapshot2))));
  REQUIRE(frozen.has_value());
  CHECK(frozen->charge.outcome == ChargeOutcome::frozen);
  CHECK_FALSE(frozen->start.has_value());
  // The two begun are in flight on their intents: no attempts row until
  // they end.
  CHECK(backend.query("SELECT count(*) FROM intents WHERE state = 'dispatched' AND attempts = 1 "
                      "AND replica_id = 'replica-a'") == "2\n");
  CHECK(backend.query("SELECT count(*) FROM attempts") == "0\n");
}

LEDGER_CONFORMANCE(admit_concurrent,
                   "admit: 64 concurrent guarded writes plus 16 racing on one fingerprint share few commits") {
  auto ledger = open_ledger(backend);
  std::vector<Task<Admitted>> ops;
  for (int i = 0; i < 80; ++i) {
    bool shared = i % 5 == 0;
    ops.push_back(admit_and_settle(*ledger, admit_request(shared ? "shared" : "own-" + std::to_string(i),
                                                          "key-" + std::to_string(i))));
  }
  int started = 0, own_completed = 0;
  std::set<std::int64_t> shared_ids;
  int index = 0;
  for (auto& a : run_all(std::move(ops), 2)) {
    bool shared = index++ % 5 == 0;
    REQUIRE_MESSAGE(a.admission.has_value(), a.admission.error().message());
    CHECK(a.admission->charge.outcome == ChargeOutcome::counted);
    if (a.admission->start) {
      CHECK(a.admission->start->outcome == AttemptOutcome::started);
      ++started;
      REQUIRE(a.outcome.has_value());
      CHECK(a.outcome->has_value());
      if (!shared) ++own_completed;
    } else {
      CHECK(shared);
      CHECK(a.admission->reservation.outcome == ReserveOutcome::existing);
    }
    if (shared) shared_ids.insert(a.admission->reservation.intent.id);
  }
  CHECK(own_completed == 64);
  CHECK(started == 65);  // one per own fingerprint, one for the shared one
  CHECK(shared_ids.size() == 1);
  auto batches = ledger->stats().batches.load();
  auto jobs = ledger->stats().batched_jobs.load();
  CHECK(run(ledger->find_run("run-1"))->calls == 80);
  CHECK(backend.query("SELECT count(*) FROM attempt_history") == "65\n");
  CHECK(jobs == 80 + 65);
  CHECK(batches < jobs);  // fewer durable commits than calls
  MESSAGE(backend.name() << ": 80 admissions + 65 outcomes in " << batches << " transactions ("
                         << double(jobs) / double(batches) << " per commit)");
}

LEDGER_CONFORMANCE(batched_charges, "count_calls: many runs in one call, in order, as count_call would") {
  auto store = migrated_store(backend);
  REQUIRE(store->count_call("frozen", 10, CallKind::write).has_value());
  REQUIRE(store->set_run_state("frozen", RunState::frozen, "test").has_value());
  std::vector<ChargeRequest> requests{{"a", 2, CallKind::write}, {"a", 2, CallKind::read}, {"a", 2, CallKind::write},
                                      {"b", 5, CallKind::write}, {"frozen", 10, CallKind::write},
                                      {"frozen", 10, CallKind::read}};
  std::vector<Result<RunCharge>> results;
  auto failed = store->batch([&] { results = store->count_calls(requests); });
  REQUIRE_FALSE(failed);
  REQUIRE(results.size() == 6);
  for (auto& r : results) REQUIRE_MESSAGE(r.has_value(), r.error().message());
  CHECK(results[0]->outcome == ChargeOutcome::counted);
  CHECK(results[0]->calls == 1);
  CHECK(results[1]->outcome == ChargeOutcome::counted);
  CHECK(results[1]->calls == 2);
  CHECK(results[2]->outcome == ChargeOutcome::exhausted);
  CHECK(results[3]->outcome == ChargeOutcome::counted);
  CHECK(results[4]->outcome == ChargeOutcome::frozen);
  CHECK(results[5]->outcome == ChargeOutcome::counted);
  CHECK(backend.query("SELECT run_id FROM runs ORDER BY run_id") == "a\nb\nfrozen\n");
  CHECK(backend.query("SELECT calls FROM runs ORDER BY run_id") == "2\n1\n2\n");
  CHECK(backend.query("SELECT budget FROM runs ORDER BY run_id") == "2\n5\n10\n");
}

LEDGER_CONFORMANCE(batched_attempts, "begin_attempts: the compare-and-set per intent, many in one call") {
  auto store = migrated_store(backend);
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 3; ++i) {
    auto request = reserve_request("fp-" + std::to_string(i), "key-" + std::to_string(i));
    auto r = store->reserve_intents({&request, 1}).front();
    REQUIRE(r.has_value());
    ids.push_back(r->intent.id);
  }
  std::vector<AttemptRequest> requests{
      {ids[0], IntentState::reserved, 0, 3, Millis(60000)},
      {ids[1], IntentState::retryable, 0, 3, Millis(60000)},  // not the state it is in: changed
      {ids[2], IntentState::reserved, 0, 3, Millis(60000)},
      {ids[2] + 1000, IntentState::reserved, 0, 3, Millis(60000)}};
  std::vector<Result<AttemptStart>> results;
  auto failed = store->batch([&] { results = store->begin_attempts(requests, "replica-x"); });
  REQUIRE_FALSE(failed);
  REQUIRE(results.size() == 4);
  REQUIRE(results[0].has_value());
  CHECK(results[0]->outcome == AttemptOutcome::started);
  CHECK(results[0]->attempt == 1);
  CHECK(results[0]->intent.state == IntentState::dispatched);
  REQUIRE(results[1].has_value());
  CHECK(results[1]->outcome == AttemptOutcome::changed);
  CHECK(results[1]->intent.state == IntentState::reserved);
  REQUIRE(results[2].has_value());
  CHECK(results[2]->outcome == AttemptOutcome::started);
  CHECK(results[3].error() == errc::not_found);
  CHECK(backend.query("SELECT intent_id FROM attempts ORDER BY intent_id") ==
        std::to_string(ids[0]) + "\n" + std::to_string(ids[2]) + "\n");
  CHECK(backend.query("SELECT number || ' ' || replica_id || ' ' || state FROM attempts ORDER BY intent_id") ==
        "1 replica-x dispatched\n1 replica-x dispatched\n");
}

LEDGER_CONFORMANCE(reserve_with_start,
                   "reserve_intents with a start stores a fresh intent with attempt 1 begun, and only a fresh one") {
  auto store = migrated_store(backend);
  auto with_start = [](const std::string& fp, const std::string& key) {
    auto r = reserve_request(fp, key);
    r.start = ReserveRequest::Start{Millis(60000), "replica-s"};
    return r;
  };
  // Two requests for one fingerprint and one for another, in one call.
  std::vector<ReserveRequest> requests{with_start("s-1", "k-1"), with_start("s-1", "k-2"), with_start("s-2", "k-3")};
  auto results = store->reserve_intents(requests);
  REQUIRE(results.size() == 3);
  for (auto& r : results) REQUIRE_MESSAGE(r.has_value(), r.error().message());
  CHECK(results[0]->outcome == ReserveOutcome::reserved);
  CHECK(results[0]->started);
  CHECK(results[0]->intent.state == IntentState::dispatched);
  CHECK(results[0]->intent.attempts == 1);
  CHECK(results[0]->intent.lease_until.has_value());
  CHECK(results[1]->outcome == ReserveOutcome::existing);
  CHECK(!results[1]->started);
  CHECK(results[1]->intent.id == results[0]->intent.id);
  CHECK(results[2]->started);
  auto id = std::to_string(results[0]->intent.id);
  // In flight, each attempt lives on its intent, with the replica that began
  // it; its attempts row is written when it ends.
  CHECK(backend.query("SELECT replica_id FROM intents WHERE id = " + id) == "replica-s\n");
  CHECK(backend.query("SELECT count(*) FROM attempts") == "0\n");
  // The attempt is what begin_attempt would have begun: it settles as one,
  // and its history (on its intent, answered) says who began it, when, and
  // how it ended.
  auto settled = store->record_outcome(completed(results[0]->intent.id, 1));
  REQUIRE_MESSAGE(settled.has_value(), settled.error().message());
  CHECK(settled->state == IntentState::completed);
  CHECK_FALSE(settled->lease_until.has_value());  // reported while dispatched only
  CHECK(backend.query("SELECT number || ' ' || replica_id || ' ' || state || ' ' || answer_class "
                      "FROM attempt_history WHERE intent_id = " + id) == "1 replica-s answered ok\n");
  CHECK(backend.query("SELECT count(*) FROM attempt_history a JOIN intents i ON i.id = a.intent_id "
                      "WHERE a.started_at = i.created_at AND a.finished_at IS NOT NULL AND a.intent_id = " + id) ==
        "1\n");
  // Again for a live fingerprint: existing, nothing begun.
  auto again = with_start("s-2", "k-4");
  auto existing = store->reserve_intents({&again, 1}).front();
  REQUIRE(existing.has_value());
  CHECK(existing->outcome == ReserveOutcome::existing);
  CHECK(!existing->started);
  CHECK(existing->intent.attempts == 1);
  // s-1's answered, s-2's still in flight (both on their intents).
  CHECK(backend.query("SELECT count(*) FROM attempts") == "0\n");
  CHECK(backend.query("SELECT state FROM attempt_history ORDER BY intent_id") == "answered\ndispatched\n");
  // Without a start: reserved, no attempt.
  auto plain = reserve_request("s-3", "k-5");
  auto reserved = store->reserve_intents({&plain, 1}).front();
  REQUIRE(reserved.has_value());
  CHECK(!reserved->started);
  CHECK(reserved->intent.state == IntentState::reserved);
  CHECK(reserved->intent.attempts == 0);
}

LEDGER_CONFORMANCE(admit_refused_charge_begins_nothing,
                   "admit: a refused charge leaves the fresh reservation reserved with no attempt") {
  auto ledger = open_ledger(backend);
  auto first = run(admit_and_settle(*ledger, admit_request("b-1", "k-1", 1, "run-b")));
  REQUIRE(first.admission.has_value());
  REQUIRE(first.admission->start.has_value());
  auto second = run(admit_and_settle(*ledger, admit_request("b-2", "k-2", 1, "run-b")));
  REQUIRE(second.admission.has_value());
  CHECK(second.admission->charge.outcome == ChargeOutcome::exhausted);
  CHECK(!second.admission->start.has_value());
  CHECK(!second.admission->reservation.started);
  CHECK(second.admission->reservation.intent.state == IntentState::reserved);
  CHECK(backend.query("SELECT count(*) FROM attempts WHERE intent_id = " +
                      std::to_string(second.admission->reservation.intent.id)) == "0\n");
}

LEDGER_CONFORMANCE(admit_alone_existing_and_superseded,
                   "admit alone: a live fingerprint is existing (charge counted, nothing begun), one whose window passed is superseded and begun") {
  auto ledger = open_ledger(backend);
  auto first = run(admit_and_settle(*ledger, admit_request("x-1", "k-1")));
  REQUIRE(first.admission.has_value());
  REQUIRE(first.admission->start.has_value());
  auto id = first.admission->reservation.intent.id;

  auto again = run(admit_and_settle(*ledger, admit_request("x-1", "k-2")));
  REQUIRE_MESSAGE(again.admission.has_value(), again.admission.error().message());
  CHECK(again.admission->charge.outcome == ChargeOutcome::counted);
  CHECK(again.admission->charge.calls == 2);
  CHECK(again.admission->reservation.outcome == ReserveOutcome::existing);
  CHECK(again.admission->reservation.intent.id == id);
  CHECK(again.admission->reservation.intent.state == IntentState::completed);
  CHECK(!again.admission->reservation.started);
  CHECK(!again.admission->start.has_value());

  // A window of 0: the completed intent gives its fingerprint up at once.
  auto zero = [](const std::string& key) {
    auto r = admit_request("x-2", key);
    r.reserve.window = Millis(0);
    return r;
  };
  auto old = run(admit_and_settle(*ledger, zero("k-3")));
  REQUIRE(old.admission.has_value());
  REQUIRE(old.outcome.has_value());
  REQUIRE(old.outcome->has_value());
  auto fresh = run(admit_and_settle(*ledger, zero("k-4")));
  REQUIRE_MESSAGE(fresh.admission.has_value(), fresh.admission.error().message());
  CHECK(fresh.admission->reservation.outcome == ReserveOutcome::reserved);
  CHECK(fresh.admission->reservation.intent.key == "k-4");
  CHECK(fresh.admission->reservation.intent.id != old.admission->reservation.intent.id);
  REQUIRE(fresh.admission->start.has_value());
  CHECK(fresh.admission->start->attempt == 1);
  // Answered, its first attempt stays on its intent (schema version 12):
  // attempt_history shows it.
  CHECK(backend.query("SELECT count(*) FROM attempt_history WHERE intent_id = " +
                      std::to_string(fresh.admission->reservation.intent.id)) == "1\n");
  CHECK(run(ledger->find_run("run-1"))->calls == 4);
}

// Every way of writing an attempt writes it for an intent that exists, with
// a number within the intent's count, and the intent's current attempt is
// written: the lease sweeper and the outcomes find in-flight work through
// these rows.
LEDGER_CONFORMANCE(attempts_have_intents,
                   "every way of writing an attempt writes it for an intent that exists and counts it") {
  auto ledger = open_ledger(backend);
  // A lone admission (on PostgreSQL its one statement), then admissions
  // waiting together (the batch's reservations), each settled.
  auto lone = run(admit_and_settle(*ledger, admit_request("o-1", "k-1")));
  REQUIRE(lone.admission.has_value());
  REQUIRE(lone.admission->start.has_value());
  std::vector<Task<Admitted>> together;
  for (int i = 2; i <= 6; ++i)
    together.push_back(admit_and_settle(*ledger, admit_request("o-" + std::to_string(i), "k-" + std::to_string(i))));
  for (auto& a : run_all(std::move(together), 3)) {
    REQUIRE(a.admission.has_value());
    REQUIRE(a.admission->start.has_value());
  }

  auto store = open_store(backend);
  auto with_start = reserve_request("o-7", "k-7");
  with_start.start = ReserveRequest::Start{Millis(60000), "replica-s"};
  std::vector<ReserveRequest> requests{with_start, reserve_request("o-8", "k-8"), reserve_request("o-9", "k-9")};
  auto reserved = store->reserve_intents(requests);
  for (auto& r : reserved) REQUIRE_MESSAGE(r.has_value(), r.error().message());
  auto const retried = reserved[1]->intent.id;
  auto const batched = reserved[2]->intent.id;
  // A lone attempt, and a second after a retryable answer.
  auto first = store->begin_attempt(AttemptRequest{retried, IntentState::reserved, 0, 3, Millis(60000)}, "replica-b");
  REQUIRE(first.has_value());
  REQUIRE(first->outcome == AttemptOutcome::started);
  auto retryable = completed(retried, 1);
  retryable.state = IntentState::retryable;
  REQUIRE(store->record_outcome(retryable).has_value());
  auto second = store->begin_attempt(AttemptRequest{retried, IntentState::retryable, 1, 3, Millis(60000)}, "replica-b");
  REQUIRE(second.has_value());
  REQUIRE(second->outcome == AttemptOutcome::started);
  CHECK(second->attempt == 2);
  // Many at once, one of them for no intent at all.
  std::vector<AttemptRequest> many{{batched, IntentState::reserved, 0, 3, Millis(60000)},
                                   {batched + 1000, IntentState::reserved, 0, 3, Millis(60000)}};
  std::vector<Result<AttemptStart>> begun;
  REQUIRE_FALSE(store->batch([&] { begun = store->begin_attempts(many, "replica-c"); }));
  REQUIRE(begun.size() == 2);
  REQUIRE(begun[0].has_value());
  CHECK(begun[0]->outcome == AttemptOutcome::started);
  CHECK(begun[1].error() == errc::not_found);

  // 6 admissions (settled, answered: their attempts stay on their
  // intents), 2 attempts of one intent and 1 of the batch (rows), and the
  // reservation begun with its attempt (o-7), in flight on its intent, with
  // the replica that began it: 10 in the history, each on an intent whose
  // count covers its number, every intent's current attempt among them.
  CHECK(backend.query("SELECT count(*) FROM attempts") == "3\n");
  CHECK(backend.query("SELECT count(*) FROM attempt_history") == "10\n");
  CHECK(backend.query("SELECT count(*) FROM attempt_history a LEFT JOIN intents i ON i.id = a.intent_id "
                      "WHERE i.id IS NULL OR a.number < 1 OR a.number > i.attempts") == "0\n");
  CHECK(backend.query("SELECT count(*) FROM intents i WHERE attempts > 0 AND NOT EXISTS "
                      "(SELECT 1 FROM attempt_history a WHERE a.intent_id = i.id AND a.number = i.attempts)") == "0\n");
  CHECK(backend.query("SELECT fingerprint || ' ' || a.number || ' ' || a.state || ' ' || a.replica_id FROM intents i "
                      "JOIN attempt_history a ON a.intent_id = i.id WHERE a.finished_at IS NULL ORDER BY i.id") ==
        "o-7 1 dispatched replica-s\no-8 2 dispatched replica-b\no-9 1 dispatched replica-c\n");
  CHECK(backend.query("SELECT count(*) FROM attempts WHERE intent_id = " + std::to_string(reserved[0]->intent.id)) ==
        "0\n");  // o-7's lives on its intent
}
