// What the operator surface reads: the dashboard signals (dash_* views), the
// unknowns the escalation sweeper has still to escalate and the background
// lookups it claims.
#include "backend.hpp"

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

namespace {

std::int64_t unknown_intent(Ledger& ledger, const std::string& fingerprint, Millis ttl,
                            const std::string& tool = "stripe.create_charge") {
  auto request = reserve_request(fingerprint, "key-" + fingerprint);
  request.unknown_ttl = ttl;
  request.tool = tool;
  auto reserved = run(ledger.reserve_intent(request, {}));
  REQUIRE(reserved.has_value());
  REQUIRE(run(ledger.begin_attempt(attempt_now(ledger, reserved->intent.id))).has_value());
  REQUIRE(run(ledger.mark_unknown(reserved->intent.id, 1)).has_value());
  return reserved->intent.id;
}

}  // namespace

LEDGER_CONFORMANCE(unescalated_unknowns, "an unknown past its TTL is listed until it has an unknown escalation") {
  auto ledger = open_ledger(backend);
  auto expired = unknown_intent(*ledger, "fp-sweep-0", Millis(0));
  auto other = unknown_intent(*ledger, "fp-sweep-1", Millis(0));
  unknown_intent(*ledger, "fp-sweep-2", std::chrono::hours(1));
  auto listed = run(ledger->list_unescalated_unknowns());
  REQUIRE(listed.has_value());
  REQUIRE(listed->size() == 2);

  // Another reason does not count; money_unknown (in any state) does.
  REQUIRE(run(ledger->persist_escalation({"run-1", expired, "run_frozen", "{}"})).has_value());
  CHECK(run(ledger->list_unescalated_unknowns())->size() == 2);
  auto escalation = run(ledger->persist_escalation({"run-1", expired, "money_unknown", "{}"}));
  REQUIRE(escalation.has_value());
  REQUIRE(run(ledger->resolve_escalation({*escalation, Resolution::approve, "", ""})).has_value());
  REQUIRE(run(ledger->persist_escalation({"run-1", other, "tool_outcome_unknown", "{}"})).has_value());
  listed = run(ledger->list_unescalated_unknowns());
  REQUIRE(listed.has_value());
  CHECK(listed->empty());
  CHECK(run(ledger->list_unknown_past_ttl())->size() == 2);
}

LEDGER_CONFORMANCE(claim_lookups, "each due unknown of a listed tool is claimed for its background lookup once") {
  auto ledger = open_ledger(backend);
  auto due = unknown_intent(*ledger, "fp-look-0", std::chrono::hours(1), "orders.create");
  auto later = unknown_intent(*ledger, "fp-look-1", std::chrono::hours(1), "orders.slow");
  auto other_tool = unknown_intent(*ledger, "fp-look-2", std::chrono::hours(1), "stripe.create_charge");
  // Settled before the sweeper came: never claimed.
  auto settled = unknown_intent(*ledger, "fp-look-3", std::chrono::hours(1), "orders.create");
  Outcome o;
  o.intent_id = settled;
  o.state = IntentState::completed;
  o.answer_class = "ok";
  o.receipt = "ord_1";
  REQUIRE(run(ledger->record_outcome(o)).has_value());

  std::vector<LookupDue> const tools{{"orders.create", Millis(0)}, {"orders.slow", std::chrono::hours(1)}};
  auto claimed = run(ledger->claim_lookups(tools));
  REQUIRE(claimed.has_value());
  REQUIRE(claimed->size() == 1);
  CHECK(claimed->front().id == due);
  CHECK(claimed->front().key == "key-fp-look-0");
  CHECK(claimed->front().state == IntentState::unknown);
  CHECK(claimed->front().looked_up_at.has_value());
  // Once: neither a second pass nor another replica claims it again.
  auto again = run(ledger->claim_lookups(tools));
  REQUIRE(again.has_value());
  CHECK(again->empty());
  auto replica_b = open_ledger(backend, "replica-b");
  CHECK(run(replica_b->claim_lookups(tools))->empty());
  // Due now for the slow tool too: only the intent not claimed yet.
  claimed = run(ledger->claim_lookups({{"orders.slow", Millis(0)}, {"orders.create", Millis(0)}}));
  REQUIRE(claimed.has_value());
  REQUIRE(claimed->size() == 1);
  CHECK(claimed->front().id == later);
  CHECK(run(ledger->claim_lookups({}))->empty());
  // Claiming changes nothing else: still unknown, still listed for escalation.
  CHECK(run(ledger->find_intent(due))->state == IntentState::unknown);
  CHECK(run(ledger->find_intent(due))->looked_up_at.has_value());
  CHECK(run(ledger->find_intent(other_tool))->state == IntentState::unknown);
  CHECK_FALSE(run(ledger->find_intent(other_tool))->looked_up_at.has_value());
  CHECK(run(ledger->list_unknown_past_ttl())->empty());
}

LEDGER_CONFORMANCE(signals, "the dashboard signals read the dash_* views") {
  auto ledger = open_ledger(backend);
  auto const since = std::chrono::time_point_cast<Millis>(Clock::now() - std::chrono::hours(24));
  auto empty = run(ledger->read_signals(since));
  REQUIRE(empty.has_value());
  CHECK(empty->open_escalations.empty());
  CHECK(empty->escalations_by_hour.empty());
  CHECK(empty->unknown_past_ttl == 0);

  auto unknown = unknown_intent(*ledger, "fp-sig-0", Millis(0));
  auto request = reserve_request("fp-sig-1", "key-sig-1");
  auto retried = run(ledger->reserve_intent(request, {}));
  REQUIRE(retried.has_value());
  auto const id = retried->intent.id;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    REQUIRE(run(ledger->begin_attempt(attempt_now(*ledger, id))).has_value());
    Outcome o;
    o.intent_id = id;
    o.attempt = attempt;
    o.state = IntentState::retryable;
    o.answer_class = "transient";
    o.status = 503;
    REQUIRE(run(ledger->record_outcome(o)).has_value());
  }
  REQUIRE(run(ledger->record_refusal(id, "tool_retry_exhausted")).has_value());
  REQUIRE(run(ledger->record_refusal(id, "tool_retry_exhausted")).has_value());
  REQUIRE(run(ledger->persist_escalation({"run-1", unknown, "money_unknown", "{}"})).has_value());
  REQUIRE(run(ledger->persist_escalation({"run-1", id, "tool_retry_exhausted", "{}"})).has_value());
  auto resolved = run(ledger->persist_escalation({"run-1", id, "policy_deny", "{}"}));
  REQUIRE(resolved.has_value());
  REQUIRE(run(ledger->resolve_escalation({*resolved, Resolution::deny, "", ""})).has_value());

  auto s = run(ledger->read_signals(since));
  REQUIRE(s.has_value());
  REQUIRE(s->open_escalations.size() == 2);
  CHECK(s->open_escalations[0].reason_code == "money_unknown");
  CHECK(s->open_escalations[1].reason_code == "tool_retry_exhausted");
  CHECK(s->open_escalations[1].count == 1);
  std::int64_t total = 0;
  for (auto const& h : s->escalations_by_hour) {
    CHECK(h.hour.size() == 20);
    CHECK(h.hour.ends_with(":00:00Z"));
    total += h.escalations;
  }
  CHECK(total == 3);
  REQUIRE(s->retry_depth.size() == 2);  // depth 1 (the unknown) and depth 2 (the retried one)
  CHECK(s->retry_depth[1].depth == 2);
  CHECK(s->retry_depth[1].intents == 1);
  REQUIRE(s->refusals_by_hour.size() == 1);
  CHECK(s->refusals_by_hour[0].refusals == 2);
  CHECK(s->refusals_by_hour[0].fingerprints == 1);
  CHECK(s->refusals_by_hour[0].reason_code == "tool_retry_exhausted");
  CHECK(s->unknown_past_ttl == 1);
  CHECK(s->duplicate_receipts == 0);

  // Hourly series start at `since`.
  auto future = std::chrono::time_point_cast<Millis>(Clock::now() + std::chrono::hours(2));
  auto later = run(ledger->read_signals(future));
  REQUIRE(later.has_value());
  CHECK(later->escalations_by_hour.empty());
  CHECK(later->refusals_by_hour.empty());
  CHECK(later->open_escalations.size() == 2);
}
