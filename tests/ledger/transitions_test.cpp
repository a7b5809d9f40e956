// The intent state machine as the SQL enforces it: legal moves succeed,
// illegal ones come back as errc::illegal_transition and change nothing.
#include "backend.hpp"
#include "ledger/executor.hpp"

using idemgate::Task;

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

namespace {

Outcome outcome(std::int64_t id, int attempt, IntentState state, std::string answer_class) {
  Outcome o;
  o.intent_id = id;
  o.attempt = attempt;
  o.state = state;
  o.answer_class = std::move(answer_class);
  return o;
}

std::int64_t reserve(Ledger& ledger, const std::string& fp) {
  auto r = run(ledger.reserve_intent(reserve_request(fp, "key-" + fp), {}));
  REQUIRE_MESSAGE(r.has_value(), r.error().message());
  return r->intent.id;
}

AttemptStart begin(Ledger& ledger, std::int64_t id, int max_attempts = 3) {
  auto r = run(ledger.begin_attempt(attempt_now(ledger, id, max_attempts)));
  REQUIRE_MESSAGE(r.has_value(), r.error().message());
  return *r;
}

}  // namespace

LEDGER_CONFORMANCE(completed_is_final, "completed never goes back to dispatched") {
  auto ledger = open_ledger(backend);
  auto id = reserve(*ledger, "fp-complete");

  // No attempt begun: an outcome for attempt 1 is illegal.
  CHECK(run(ledger->record_outcome(outcome(id, 1, IntentState::completed, "ok"))).error() ==
        errc::illegal_transition);

  auto start = begin(*ledger, id);
  CHECK(start.outcome == AttemptOutcome::started);
  CHECK(start.attempt == 1);
  CHECK(start.intent.state == IntentState::dispatched);

  auto done = outcome(id, 1, IntentState::completed, "ok");
  done.status = 200;
  done.receipt = "ch_1";
  done.response = StoredResponse{200, {{"Content-Type", "application/json"}}, R"({"id":"ch_1"})"};
  auto completed = run(ledger->record_outcome(done));
  REQUIRE(completed.has_value());
  CHECK(completed->state == IntentState::completed);
  CHECK(completed->receipt == "ch_1");
  REQUIRE(completed->response.has_value());
  CHECK(completed->response->body == R"({"id":"ch_1"})");
  CHECK(completed->response->headers.size() == 1);

  // Replay, never re-send.
  CHECK(begin(*ledger, id).outcome == AttemptOutcome::completed);
  CHECK(run(ledger->record_outcome(done)).error() == errc::illegal_transition);
  CHECK(run(ledger->mark_unknown(id, 1)).error() == errc::illegal_transition);
  CHECK(run(ledger->record_outcome(outcome(id, 0, IntentState::denied, "policy_deny"))).error() ==
        errc::illegal_transition);
  // Dispatched and reserved are never outcome targets.
  CHECK(run(ledger->record_outcome(outcome(id, 1, IntentState::dispatched, ""))).error() ==
        errc::illegal_transition);
  CHECK(run(ledger->record_outcome(outcome(id, 0, IntentState::reserved, ""))).error() ==
        errc::illegal_transition);

  auto after = run(ledger->find_intent(id));
  REQUIRE(after.has_value());
  CHECK(after->state == IntentState::completed);
  CHECK(after->attempts == 1);
  CHECK(backend.query("SELECT state FROM attempts WHERE intent_id = " + std::to_string(id)) ==
        "answered\n");
}

LEDGER_CONFORMANCE(retry_bound, "retryable intents are retried under the same key up to the bound") {
  auto ledger = open_ledger(backend);
  auto id = reserve(*ledger, "fp-retry");
  CHECK(begin(*ledger, id, 2).attempt == 1);

  // Retry-After in the future: not yet.
  auto limited = outcome(id, 1, IntentState::retryable, "rate_limited");
  limited.status = 429;
  limited.retry_after = std::chrono::hours(1);
  REQUIRE(run(ledger->record_outcome(limited)).has_value());
  auto early = begin(*ledger, id, 2);
  CHECK(early.outcome == AttemptOutcome::not_yet);
  REQUIRE(early.intent.retry_not_before.has_value());

  // Only the current attempt may be settled: a stale attempt number is illegal.
  CHECK(run(ledger->record_outcome(outcome(id, 1, IntentState::retryable, "transient"))).error() ==
        errc::illegal_transition);

  backend.query("UPDATE intents SET retry_not_before = NULL WHERE id = " + std::to_string(id));
  auto second = begin(*ledger, id, 2);
  CHECK(second.outcome == AttemptOutcome::started);
  CHECK(second.attempt == 2);
  CHECK(second.intent.key == "key-fp-retry");
  CHECK(begin(*ledger, id, 2).outcome == AttemptOutcome::in_flight);
  REQUIRE(run(ledger->record_outcome(outcome(id, 2, IntentState::retryable, "transient"))).has_value());
  CHECK(begin(*ledger, id, 2).outcome == AttemptOutcome::exhausted);

  // At the bound the proxy refuses; it may settle the intent as denied.
  REQUIRE(run(ledger->record_refusal(id, "tool_retry_exhausted")).has_value());
  auto denied = run(ledger->record_outcome(outcome(id, 0, IntentState::denied, "transient")));
  REQUIRE(denied.has_value());
  CHECK(denied->state == IntentState::denied);
  CHECK(begin(*ledger, id, 5).outcome == AttemptOutcome::denied);
  CHECK(backend.query("SELECT refusals FROM dash_same_fingerprint_refusals") == "1\n");
  CHECK(backend.query("SELECT depth || ':' || intents FROM dash_retry_depth") == "2:1\n");
}

LEDGER_CONFORMANCE(unknown_outcome, "unknown is reconciled under the same key and never lost") {
  auto ledger = open_ledger(backend);
  auto id = reserve(*ledger, "fp-unknown");
  begin(*ledger, id);
  auto unknown = run(ledger->mark_unknown(id, 1));
  REQUIRE(unknown.has_value());
  CHECK(unknown->state == IntentState::unknown);
  CHECK(unknown->unknown_since.has_value());

  // same_key reconciliation: re-send under the original key.
  auto again = begin(*ledger, id);
  CHECK(again.outcome == AttemptOutcome::started);
  CHECK(again.intent.key == "key-fp-unknown");
  // Attempt 2 owns the intent now: attempt 1's late answer is refused
  // (lease_test: before another attempt begins, a late answer settles it).
  CHECK(run(ledger->record_outcome(outcome(id, 1, IntentState::completed, "ok"))).error() ==
        errc::illegal_transition);
  REQUIRE(run(ledger->mark_unknown(id, 2)).has_value());

  // query reconciliation found it: completed without another attempt.
  auto found = outcome(id, 0, IntentState::completed, "ok");
  found.receipt = "ch_found";
  auto reconciled = run(ledger->record_outcome(found));
  REQUIRE(reconciled.has_value());
  CHECK(reconciled->state == IntentState::completed);
  CHECK(reconciled->receipt == "ch_found");
  CHECK_FALSE(reconciled->unknown_since.has_value());
  CHECK(backend.query("SELECT count(*) FROM dash_duplicate_receipts") == "0\n");
}

LEDGER_CONFORMANCE(refused_before_dispatch, "refused before dispatch: denied and never dispatched") {
  auto ledger = open_ledger(backend);
  auto id = reserve(*ledger, "fp-deny");
  auto denied = run(ledger->record_outcome(outcome(id, 0, IntentState::denied, "policy_deny")));
  REQUIRE(denied.has_value());
  CHECK(denied->attempts == 0);
  CHECK(begin(*ledger, id).outcome == AttemptOutcome::denied);
  CHECK(run(ledger->find_intent(987654)).error() == errc::not_found);
  CHECK(run(ledger->record_outcome(outcome(987654, 1, IntentState::completed, "ok"))).error() ==
        errc::not_found);
}

LEDGER_CONFORMANCE(from_a_coroutine, "the decision flow awaited from inside a coroutine") {
  auto ledger = open_ledger(backend);
  // What the enforcement layer does per request, on a network thread.
  auto flow = [&]() -> Task<IntentState> {
    auto request = reserve_request("fp-coro", "key-coro");
    RequestSnapshot snapshot{"POST", "/v1/charges", {{"Content-Type", "application/json"}},
                             R"({"amount":1})"};
    auto charge = co_await ledger->count_call("run-1", 10, CallKind::write);
    CHECK(charge->outcome == ChargeOutcome::counted);
    auto reserved = co_await ledger->reserve_intent(request, snapshot);
    CHECK(reserved->outcome == ReserveOutcome::reserved);
    auto started = co_await ledger->begin_attempt(AttemptRequest{reserved->intent.id, IntentState::reserved, 0, 3, std::chrono::minutes(1)});
    CHECK(started->outcome == AttemptOutcome::started);
    auto done = outcome(reserved->intent.id, started->attempt, IntentState::completed, "ok");
    auto completed = co_await ledger->record_outcome(done);
    auto replay = co_await ledger->begin_attempt(AttemptRequest{reserved->intent.id, IntentState::completed, 1, 3, std::chrono::minutes(1)});
    CHECK(replay->outcome == AttemptOutcome::completed);
    co_return completed->state;
  };
  CHECK(run(flow()) == IntentState::completed);
}

LEDGER_CONFORMANCE(unknown_past_ttl, "unknown intents past their TTL are listed for escalation") {
  auto ledger = open_ledger(backend);
  auto expired = reserve_request("fp-ttl-0", "key-ttl-0");
  expired.unknown_ttl = Millis(0);
  auto fresh = reserve_request("fp-ttl-1", "key-ttl-1");
  fresh.unknown_ttl = std::chrono::hours(1);
  for (auto* request : {&expired, &fresh}) {
    auto reserved = run(ledger->reserve_intent(*request, {}));
    REQUIRE(reserved.has_value());
    REQUIRE(run(ledger->begin_attempt(attempt_now(*ledger, reserved->intent.id))).has_value());
    REQUIRE(run(ledger->mark_unknown(reserved->intent.id, 1)).has_value());
  }
  auto listed = run(ledger->list_unknown_past_ttl());
  REQUIRE(listed.has_value());
  REQUIRE(listed->size() == 1);
  CHECK(listed->front().key == "key-ttl-0");
  CHECK(backend.query("SELECT idem_key FROM dash_unknown_past_ttl") == "key-ttl-0\n");
}
