// Runs (budget, freeze, kill) and the escalation queue (persist, list,
// resolve, and what resolving does to the intent).
#include "backend.hpp"
#include "ledger/executor.hpp"

using idemgate::Task;

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

LEDGER_CONFORMANCE(run_budget, "calls are counted against the run's budget") {
  auto ledger = open_ledger(backend);
  for (int i = 1; i <= 2; ++i) {
    auto charge = run(ledger->count_call("run-b", 2, CallKind::write));
    REQUIRE(charge.has_value());
    CHECK(charge->outcome == ChargeOutcome::counted);
    CHECK(charge->calls == i);
  }
  auto over = run(ledger->count_call("run-b", 2, CallKind::read));
  REQUIRE(over.has_value());
  CHECK(over->outcome == ChargeOutcome::exhausted);
  CHECK(over->calls == 2);

  // Concurrent charges never overspend.
  std::vector<Task<Result<RunCharge>>> ops;
  for (int i = 0; i < 40; ++i) ops.push_back(ledger->count_call("run-c", 25, CallKind::write));
  int counted = 0;
  for (const auto& r : run_all(std::move(ops), 4)) {
    REQUIRE(r.has_value());
    counted += r->outcome == ChargeOutcome::counted;
  }
  CHECK(counted == 25);
}

LEDGER_CONFORMANCE(run_states, "frozen runs refuse writes and killed runs refuse all for good") {
  auto ledger = open_ledger(backend);
  CHECK(run(ledger->freeze_run("run-x", "tool_auth_error")).error() == errc::not_found);
  REQUIRE(run(ledger->count_call("run-x", 100, CallKind::read)).has_value());

  auto frozen = run(ledger->freeze_run("run-x", "tool_auth_error"));
  REQUIRE(frozen.has_value());
  CHECK(frozen->state == RunState::frozen);
  CHECK(frozen->reason == "tool_auth_error");
  CHECK(run(ledger->count_call("run-x", 100, CallKind::write))->outcome == ChargeOutcome::frozen);
  CHECK(run(ledger->count_call("run-x", 100, CallKind::read))->outcome == ChargeOutcome::counted);

  REQUIRE(run(ledger->unfreeze_run("run-x")).has_value());
  CHECK(run(ledger->count_call("run-x", 100, CallKind::write))->outcome == ChargeOutcome::counted);

  auto killed = run(ledger->kill_run("run-x", "operator"));
  REQUIRE(killed.has_value());
  CHECK(killed->state == RunState::killed);
  CHECK(run(ledger->count_call("run-x", 100, CallKind::read))->outcome == ChargeOutcome::killed);
  CHECK(run(ledger->unfreeze_run("run-x")).error() == errc::illegal_transition);
  CHECK(run(ledger->freeze_run("run-x", "again")).error() == errc::illegal_transition);
  CHECK(run(ledger->find_run("run-x"))->state == RunState::killed);
}

LEDGER_CONFORMANCE(escalations, "escalations are persisted and listed and resolved once") {
  auto ledger = open_ledger(backend);
  auto reserved = run(ledger->reserve_intent(reserve_request("fp-esc", "key-esc"), {}));
  REQUIRE(reserved.has_value());
  auto id = reserved->intent.id;
  REQUIRE(run(ledger->begin_attempt(attempt_now(*ledger, id))).has_value());
  REQUIRE(run(ledger->mark_unknown(id, 1)).has_value());

  EscalationRequest request{"run-1", id, "money_unknown",
                            R"({"reason_code":"money_unknown","idempotency_key":"key-esc"})"};
  auto escalation_id = run(ledger->persist_escalation(request));
  REQUIRE(escalation_id.has_value());
  auto other = run(ledger->persist_escalation({"run-1", std::nullopt, "policy_deny", "{}"}));
  REQUIRE(other.has_value());

  auto open = run(ledger->list_escalations(EscalationState::open));
  REQUIRE(open.has_value());
  REQUIRE(open->size() == 2);
  CHECK(open->front().id == *other);  // newest first
  CHECK(open->back().package_json == request.package_json);
  CHECK(open->back().intent_id == id);

  // A human finds the charge: completed with its receipt.
  auto resolved = run(ledger->resolve_escalation({*escalation_id, Resolution::complete, "ch_9", "found it"}));
  REQUIRE(resolved.has_value());
  CHECK(resolved->state == EscalationState::completed);
  CHECK(resolved->receipt == "ch_9");
  auto intent = run(ledger->find_intent(id));
  CHECK(intent->state == IntentState::completed);
  CHECK(intent->receipt == "ch_9");
  CHECK(run(ledger->resolve_escalation({*escalation_id, Resolution::deny, "", ""})).error() ==
        errc::illegal_transition);
  CHECK(run(ledger->resolve_escalation({424242, Resolution::deny, "", ""})).error() ==
        errc::not_found);

  REQUIRE(run(ledger->resolve_escalation({*other, Resolution::approve, "", "ok"})).has_value());
  CHECK(run(ledger->list_escalations(EscalationState::open))->empty());
  CHECK(run(ledger->list_escalations(std::nullopt))->size() == 2);
  CHECK(backend.query("SELECT sum(escalations) FROM dash_escalations_by_reason_hourly") == "2\n");
}

LEDGER_CONFORMANCE(escalation_deny, "denying an escalation settles its intent as denied") {
  auto ledger = open_ledger(backend);
  auto reserved = run(ledger->reserve_intent(reserve_request("fp-esc-d", "key-esc-d"), {}));
  REQUIRE(reserved.has_value());
  auto id = reserved->intent.id;
  auto escalation = run(ledger->persist_escalation({"run-1", id, "pending_approval", "{}"}));
  REQUIRE(escalation.has_value());
  REQUIRE(run(ledger->resolve_escalation({*escalation, Resolution::deny, "", "no"})).has_value());
  CHECK(run(ledger->find_intent(id))->state == IntentState::denied);
  CHECK(run(ledger->begin_attempt(attempt_now(*ledger, id)))->outcome == AttemptOutcome::denied);
}
