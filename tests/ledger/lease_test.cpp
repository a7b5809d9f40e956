// Attempts as owned, compared-and-set moves: begin_attempt starts only from
// the state and attempt count a verdict was made from; a "key in use" answer
// does not spend the bound; the late answer of an expired lease still
// settles the intent; and one open escalation per intent and reason, settled
// by idemgate when the intent's outcome becomes known.
#include "backend.hpp"

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;
using namespace std::chrono_literals;

namespace {

std::int64_t reserve(Ledger& ledger, const std::string& fp) {
  auto r = run(ledger.reserve_intent(reserve_request(fp, "key-" + fp), {}));
  REQUIRE_MESSAGE(r.has_value(), r.error().message());
  return r->intent.id;
}

Outcome answer(std::int64_t id, int attempt, IntentState state, std::string cls) {
  Outcome o;
  o.intent_id = id;
  o.attempt = attempt;
  o.state = state;
  o.answer_class = std::move(cls);
  return o;
}

AttemptStart begin(Ledger& ledger, const AttemptRequest& request) {
  auto r = run(ledger.begin_attempt(request));
  REQUIRE_MESSAGE(r.has_value(), r.error().message());
  return *r;
}

}  // namespace

LEDGER_CONFORMANCE(cas_on_the_verdict, "begin_attempt starts only from the state the verdict was made from") {
  auto ledger = open_ledger(backend);
  auto id = reserve(*ledger, "fp-cas");
  REQUIRE(begin(*ledger, {id, IntentState::reserved, 0, 3, 1min}).outcome == AttemptOutcome::started);
  REQUIRE(run(ledger->record_outcome(answer(id, 1, IntentState::retryable, "transient"))).has_value());

  // Two requests decide "retry" from (retryable, 1 attempt). The first starts
  // attempt 2, whose outcome becomes unknown before the second begins.
  AttemptRequest from_retryable{id, IntentState::retryable, 1, 3, 1min};
  REQUIRE(begin(*ledger, from_retryable).outcome == AttemptOutcome::started);
  REQUIRE(run(ledger->record_outcome(answer(id, 2, IntentState::unknown, "unknown"))).has_value());
  auto second = begin(*ledger, from_retryable);
  CHECK(second.outcome == AttemptOutcome::changed);
  CHECK(second.intent.state == IntentState::unknown);
  CHECK(second.intent.attempts == 2);
  // Decided from an unknown with a stale attempt count: changed too.
  CHECK(begin(*ledger, {id, IntentState::unknown, 1, 3, 1min}).outcome == AttemptOutcome::changed);
  CHECK(backend.query("SELECT count(*) FROM attempts WHERE intent_id = " + std::to_string(id)) == "2\n");
  // Decided again from what is there now (reconcile the unknown): starts.
  auto reconcile = begin(*ledger, {id, IntentState::unknown, 2, 3, 1min});
  CHECK(reconcile.outcome == AttemptOutcome::started);
  CHECK(reconcile.attempt == 3);
  REQUIRE(reconcile.intent.lease_until.has_value());
  auto const lease_left = *reconcile.intent.lease_until - reconcile.intent.updated_at;
  CHECK(lease_left >= 59s);
  CHECK(lease_left <= 61s);
}

LEDGER_CONFORMANCE(waived_attempts, "a key-in-use answer while reconciling does not spend the bound") {
  auto ledger = open_ledger(backend);
  auto id = reserve(*ledger, "fp-waive");
  // bound 1: two attempts count.
  REQUIRE(begin(*ledger, {id, IntentState::reserved, 0, 2, 1min}).outcome == AttemptOutcome::started);
  REQUIRE(run(ledger->record_outcome(answer(id, 1, IntentState::unknown, "unknown"))).has_value());
  for (int attempt = 2; attempt <= 6; ++attempt) {
    auto start = begin(*ledger, {id, IntentState::unknown, attempt - 1, 2, 1min});
    REQUIRE(start.outcome == AttemptOutcome::started);
    auto in_use = answer(id, attempt, IntentState::unknown, "unknown");
    in_use.status = 409;
    in_use.waive = true;
    auto recorded = run(ledger->record_outcome(in_use));
    REQUIRE(recorded.has_value());
    CHECK(recorded->attempts_spent() == 1);
  }
  // A re-send that is not waived spends the last try; then the bound holds.
  REQUIRE(begin(*ledger, {id, IntentState::unknown, 6, 2, 1min}).outcome == AttemptOutcome::started);
  auto lost = run(ledger->record_outcome(answer(id, 7, IntentState::unknown, "unknown")));
  REQUIRE(lost.has_value());
  CHECK(lost->attempts_spent() == 2);
  CHECK(begin(*ledger, {id, IntentState::unknown, 7, 2, 1min}).outcome == AttemptOutcome::exhausted);
}

LEDGER_CONFORMANCE(late_answer, "the late answer of an expired lease settles the intent until another attempt begins") {
  auto ledger = open_ledger(backend);
  auto id = reserve(*ledger, "fp-late");
  REQUIRE(begin(*ledger, {id, IntentState::reserved, 0, 3, -1ms}).outcome == AttemptOutcome::started);
  REQUIRE(run(ledger->recover_expired()).value() == 1);
  CHECK(run(ledger->find_intent(id))->state == IntentState::unknown);
  auto done = answer(id, 1, IntentState::completed, "ok");
  done.receipt = "ch_late";
  auto settled = run(ledger->record_outcome(done));
  REQUIRE(settled.has_value());
  CHECK(settled->state == IntentState::completed);
  CHECK(settled->receipt == "ch_late");

  auto other = reserve(*ledger, "fp-late-2");
  REQUIRE(begin(*ledger, {other, IntentState::reserved, 0, 3, -1ms}).outcome == AttemptOutcome::started);
  REQUIRE(run(ledger->recover_expired()).value() == 1);
  REQUIRE(begin(*ledger, {other, IntentState::unknown, 1, 3, 1min}).outcome == AttemptOutcome::started);
  // Attempt 2 owns the intent now: attempt 1's answer is history.
  CHECK(run(ledger->record_outcome(answer(other, 1, IntentState::completed, "ok"))).error() ==
        errc::illegal_transition);
  CHECK(run(ledger->find_intent(other))->state == IntentState::dispatched);
}

LEDGER_CONFORMANCE(one_escalation, "one open escalation per intent and reason, settled by reconciliation") {
  auto ledger = open_ledger(backend);
  auto id = reserve(*ledger, "fp-esc");
  REQUIRE(begin(*ledger, {id, IntentState::reserved, 0, 3, 1min}).outcome == AttemptOutcome::started);
  REQUIRE(run(ledger->record_outcome(answer(id, 1, IntentState::unknown, "unknown"))).has_value());
  EscalationRequest unknown{"run-1", id, "money_unknown", R"({"n":1})"};
  auto first = run(ledger->persist_escalation(unknown));
  REQUIRE(first.has_value());
  unknown.package_json = R"({"n":2})";
  auto second = run(ledger->persist_escalation(unknown));
  REQUIRE(second.has_value());
  CHECK(*second == *first);
  EscalationRequest other_reason{"run-1", id, "budget_exhausted", "{}"};
  auto third = run(ledger->persist_escalation(other_reason));
  REQUIRE(third.has_value());
  CHECK(*third != *first);
  CHECK(backend.query("SELECT count(*) FROM escalations WHERE state = 'open'") == "2\n");
  CHECK(run(ledger->find_escalation(*first))->package_json == R"({"n":2})");

  // Reconciliation settles the intent: the unknown escalation is closed by
  // idemgate, the other reason stays for a human.
  REQUIRE(begin(*ledger, {id, IntentState::unknown, 1, 3, 1min}).outcome == AttemptOutcome::started);
  auto done = answer(id, 2, IntentState::completed, "ok");
  done.receipt = "ch_esc";
  REQUIRE(run(ledger->record_outcome(done)).has_value());
  auto closed = run(ledger->find_escalation(*first));
  REQUIRE(closed.has_value());
  CHECK(closed->state == EscalationState::completed);
  CHECK(closed->resolved_by == "idemgate");
  CHECK(closed->receipt == "ch_esc");
  CHECK(closed->resolved_at.has_value());
  CHECK(run(ledger->find_escalation(*third))->state == EscalationState::open);
  // Once closed, a new package for the same reason is a new escalation.
  auto again = run(ledger->persist_escalation(unknown));
  REQUIRE(again.has_value());
  CHECK(*again != *first);
}
