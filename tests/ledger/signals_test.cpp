// What the operator surface reads: the dashboard signals (dash_* views) and
// the unknowns the escalation sweeper has still to escalate.
#include "backend.hpp"

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

namespace {

std::int64_t unknown_intent(Ledger& ledger, const std::string& fingerprint, Millis ttl) {
  auto request = reserve_request(fingerprint, "key-" + fingerprint);
  request.unknown_ttl = ttl;
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
