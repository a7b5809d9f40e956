// decide() and after_query(), table-driven: one row per branch of SPEC
// section 2 (and of the seed's decision list), named after what it checks.
#include "policy/decide.hpp"

#include <doctest/doctest.h>

using namespace idemgate::policy;
using namespace std::chrono;

namespace {

const Clock::time_point now = sys_days{2026y / November / 30} + 12h;

Tool tool_with(Effect effect) {
  Tool tool;
  tool.name = "stripe.create_charge";
  tool.effect = effect;
  tool.retry.bound = 2;
  tool.retry.max_retry_after = 60s;
  tool.reconcile.ttl = 15min;
  tool.reconcile.settle = 30s;
  return tool;
}

IntentView intent(IntentState state, AnswerClass last = AnswerClass::ok, int attempts = 1) {
  IntentView view;
  view.state = state;
  view.key = "idem_ledger_key";
  view.last_class = last;
  view.attempts = attempts;
  view.unknown_since = now - 1min;
  return view;
}

struct Row {
  const char* name;
  Tool tool;
  DecisionInput input;
  VerdictKind kind;
  std::optional<ReasonCode> reason = std::nullopt;
  int http_status = 0;
  std::string key = "";
  std::optional<Terminal> terminal = std::nullopt;
  std::optional<Duration> retry_after = std::nullopt;
};

DecisionInput input_with(IntentView view) {
  DecisionInput in;
  in.intent = std::move(view);
  in.now = now;
  return in;
}

template <class F>
Tool changed(Tool tool, F change) {
  change(tool);
  return tool;
}

template <class F>
DecisionInput changed(DecisionInput in, F change) {
  change(in);
  return in;
}

const Tool money = tool_with(Effect::money);
const Tool write = tool_with(Effect::write);
const Tool read = tool_with(Effect::read);

std::vector<Row> rows() {
  const auto none = input_with(intent(IntentState::none, AnswerClass::ok, 0));
  return {
      {"no entry: reserve, then dispatch with a new key", money, none, VerdictKind::dispatch, {}, 0, ""},
      {"no entry with the agent's own key: dispatch with that key",
       money, changed(none, [](auto& in) { in.agent_key.present = true; }), VerdictKind::dispatch, {}, 0, "agent_key"},
      {"completed: replay, never re-send", money, input_with(intent(IntentState::completed)), VerdictKind::replay,
       {}, 0, "idem_ledger_key"},
      {"completed on a frozen run still replays (nothing is sent)", money,
       changed(input_with(intent(IntentState::completed)), [](auto& in) { in.run.state = RunState::frozen; }),
       VerdictKind::replay, {}, 0, "idem_ledger_key"},
      {"denied auth: refuse tool_auth_error, escalate", money, input_with(intent(IntentState::denied, AnswerClass::auth)),
       VerdictKind::refuse, ReasonCode::tool_auth_error, 403, "", Terminal::escalate},
      {"denied forbidden: refuse tool_forbidden", write, input_with(intent(IntentState::denied, AnswerClass::forbidden)),
       VerdictKind::refuse, ReasonCode::tool_forbidden, 403},
      {"denied validation at bound: refuse validation_repeated", write,
       input_with(intent(IntentState::denied, AnswerClass::validation)), VerdictKind::refuse,
       ReasonCode::validation_repeated, 422},
      {"denied by Should-Retry false on money: refuse money_rejected", money,
       input_with(intent(IntentState::denied, AnswerClass::money_rejected)), VerdictKind::refuse,
       ReasonCode::money_rejected, 422},
      {"denied unclassified: refuse unclassified_fail_closed", write,
       input_with(intent(IntentState::denied, AnswerClass::unclassified)), VerdictKind::refuse,
       ReasonCode::unclassified_fail_closed, 422},
      {"unknown, same_key: reconcile by re-sending the same key", money, input_with(intent(IntentState::unknown, AnswerClass::unknown)),
       VerdictKind::reconcile, {}, 0, "idem_ledger_key"},
      {"unknown, query: reconcile with the configured lookup",
       changed(money, [](auto& t) { t.reconcile.mode = ReconcileMode::query; }),
       input_with(intent(IntentState::unknown, AnswerClass::unknown)), VerdictKind::reconcile, {}, 0, "idem_ledger_key"},
      {"unknown money, mode none: escalate money_unknown",
       changed(money, [](auto& t) { t.reconcile.mode = ReconcileMode::none; }),
       input_with(intent(IntentState::unknown, AnswerClass::unknown)), VerdictKind::refuse, ReasonCode::money_unknown,
       422, "", Terminal::escalate},
      {"unknown write, mode none: escalate tool_outcome_unknown",
       changed(write, [](auto& t) { t.reconcile.mode = ReconcileMode::none; }),
       input_with(intent(IntentState::unknown, AnswerClass::unknown)), VerdictKind::refuse,
       ReasonCode::tool_outcome_unknown, 422},
      {"unknown past reconcile.ttl: escalate money_unknown", money,
       changed(input_with(intent(IntentState::unknown, AnswerClass::unknown)), [](auto& in) { in.intent.unknown_since = now - 16min; }),
       VerdictKind::refuse, ReasonCode::money_unknown, 422},
      {"unknown re-sent past the bound: escalate money_unknown", money,
       input_with(intent(IntentState::unknown, AnswerClass::unknown, 3)), VerdictKind::refuse, ReasonCode::money_unknown, 422},
      {"in flight on any replica: 409 with Retry-After", money, input_with(intent(IntentState::in_flight)),
       VerdictKind::in_flight_409, {}, 409, "", {}, Duration(1s)},
      {"retryable below the bound: dispatch again with the same key", money,
       input_with(intent(IntentState::retryable, AnswerClass::transient, 2)), VerdictKind::dispatch, {}, 0, "idem_ledger_key"},
      {"retryable with Retry-After not over: hold, then the same key", money,
       changed(input_with(intent(IntentState::retryable, AnswerClass::rate_limited, 1)),
               [](auto& in) { in.intent.retry_not_before = now + 5s; }),
       VerdictKind::hold, {}, 0, "idem_ledger_key", {}, Duration(5s)},
      {"retryable with Retry-After, mode reject: 429 with the time left",
       changed(money, [](auto& t) { t.retry.retry_after = RetryAfterMode::reject; }),
       changed(input_with(intent(IntentState::retryable, AnswerClass::rate_limited, 1)),
               [](auto& in) { in.intent.retry_not_before = now + 5s; }),
       VerdictKind::reject_429, {}, 429, "idem_ledger_key", {}, Duration(5s)},
      {"a hold never exceeds max_retry_after", money,
       changed(input_with(intent(IntentState::retryable, AnswerClass::rate_limited, 1)),
               [](auto& in) { in.intent.retry_not_before = now + 1h; }),
       VerdictKind::hold, {}, 0, "idem_ledger_key", {}, Duration(60s)},
      {"same fingerprint at the bound: refuse tool_retry_exhausted", money,
       input_with(intent(IntentState::retryable, AnswerClass::transient, 3)), VerdictKind::refuse,
       ReasonCode::tool_retry_exhausted, 422, "", Terminal::escalate},
      {"ledger unavailable: fail closed, 503 ledger_unavailable with Retry-After", money,
       input_with(intent(IntentState::unavailable)), VerdictKind::refuse, ReasonCode::ledger_unavailable, 503, "", {},
       Duration(1s)},
      {"policy deny: refuse policy_deny, abort", changed(money, [](auto& t) { t.policy = PolicyAction::deny; }), none,
       VerdictKind::refuse, ReasonCode::policy_deny, 403, "", Terminal::abort},
      {"pending approval: refuse pending_approval", changed(money, [](auto& t) { t.policy = PolicyAction::pending_approval; }),
       none, VerdictKind::refuse, ReasonCode::pending_approval, 403},
      {"pending approval, approved by an operator: dispatch",
       changed(money, [](auto& t) { t.policy = PolicyAction::pending_approval; }),
       changed(none, [](auto& in) { in.intent.approved = true; }), VerdictKind::dispatch},
      {"required field missing: refuse missing_slot", money,
       changed(none, [](auto& in) { in.missing_required = {"/amount"}; }), VerdictKind::refuse, ReasonCode::missing_slot, 422},
      {"key mode require without a key: 400 missing_slot",
       changed(money, [](auto& t) { t.idempotency.mode = KeyMode::require; }), none, VerdictKind::refuse,
       ReasonCode::missing_slot, 400},
      {"same key, different payload: 422 key_payload_mismatch", money,
       changed(none, [](auto& in) { in.agent_key = {true, true, false}; }), VerdictKind::refuse,
       ReasonCode::key_payload_mismatch, 422},
      {"different key, same fingerprint, enforce: the original key is re-sent", money,
       changed(input_with(intent(IntentState::retryable, AnswerClass::transient, 1)),
               [](auto& in) { in.agent_key = {true, false, true}; }),
       VerdictKind::dispatch, {}, 0, "idem_ledger_key"},
      {"different key, same fingerprint, enforce, completed: replay", money,
       changed(input_with(intent(IntentState::completed)), [](auto& in) { in.agent_key = {true, false, true}; }),
       VerdictKind::replay, {}, 0, "idem_ledger_key"},
      {"different key, same fingerprint, strict: refuse key_payload_mismatch",
       changed(money, [](auto& t) { t.idempotency.binding = KeyBinding::strict; }),
       changed(input_with(intent(IntentState::retryable, AnswerClass::transient, 1)),
               [](auto& in) { in.agent_key = {true, false, true}; }),
       VerdictKind::refuse, ReasonCode::key_payload_mismatch, 422},
      {"run killed: refuse run_killed, abort", money, changed(none, [](auto& in) { in.run.state = RunState::killed; }),
       VerdictKind::refuse, ReasonCode::run_killed, 403, "", Terminal::abort},
      {"run frozen: writes refused run_frozen", money, changed(none, [](auto& in) { in.run.state = RunState::frozen; }),
       VerdictKind::refuse, ReasonCode::run_frozen, 403},
      {"run frozen: reads still dispatch", read, changed(none, [](auto& in) { in.run.state = RunState::frozen; }),
       VerdictKind::dispatch},
      {"budget used up: refuse budget_exhausted", money,
       changed(none, [](auto& in) { in.run.calls_used = 200; }), VerdictKind::refuse, ReasonCode::budget_exhausted, 403},
      {"budget used up still replays a completed write", money,
       changed(input_with(intent(IntentState::completed)), [](auto& in) { in.run.calls_used = 200; }),
       VerdictKind::replay, {}, 0, "idem_ledger_key"},
      {"read completed before: dispatch again (reads are not replayed)", read, input_with(intent(IntentState::completed)),
       VerdictKind::dispatch},
      {"read failing below the bound: retried freely", read,
       input_with(intent(IntentState::denied, AnswerClass::not_found, 2)), VerdictKind::dispatch},
      {"read failing the same way past the bound: refuse tool_retry_exhausted", read,
       input_with(intent(IntentState::retryable, AnswerClass::transient, 3)), VerdictKind::refuse,
       ReasonCode::tool_retry_exhausted, 422},
  };
}

}  // namespace

TEST_CASE("decide: every row of SPEC section 2") {
  for (const auto& row : rows()) {
    SUBCASE(row.name) {
      const auto verdict = decide(row.tool, row.input, "agent_key");
      INFO("detail: " << verdict.detail);
      CHECK(to_string(verdict.kind) == to_string(row.kind));
      if (row.reason) CHECK(to_string(verdict.reason) == to_string(*row.reason));
      CHECK(verdict.http_status == row.http_status);
      CHECK(verdict.key == row.key);
      if (row.terminal) CHECK(to_string(verdict.terminal) == to_string(*row.terminal));
      CHECK(verdict.retry_after == row.retry_after);
      if (verdict.kind == VerdictKind::dispatch && row.key == "idem_ledger_key")
        CHECK(verdict.dispatch_kind == DispatchKind::retry);
    }
  }
}

TEST_CASE("after_query: found replays, not found past settle re-sends the same key, else wait") {
  auto tool = tool_with(Effect::money);
  tool.reconcile.mode = ReconcileMode::query;
  const auto unknown = intent(IntentState::unknown, AnswerClass::unknown);

  CHECK(after_query(tool, unknown, QueryOutcome::found, now, now).kind == VerdictKind::replay);

  const auto resend = after_query(tool, unknown, QueryOutcome::not_found, now - 31s, now);
  CHECK(resend.kind == VerdictKind::dispatch);
  CHECK(resend.dispatch_kind == DispatchKind::retry);
  CHECK(resend.key == "idem_ledger_key");

  const auto settling = after_query(tool, unknown, QueryOutcome::not_found, now - 10s, now);
  CHECK(settling.kind == VerdictKind::in_flight_409);
  CHECK(settling.retry_after == Duration(20s));

  CHECK(after_query(tool, unknown, QueryOutcome::failed, now, now).kind == VerdictKind::in_flight_409);

  auto expired = unknown;
  expired.unknown_since = now - 16min;
  const auto escalate = after_query(tool, expired, QueryOutcome::not_found, now - 1h, now);
  CHECK(escalate.kind == VerdictKind::refuse);
  CHECK(escalate.reason == ReasonCode::money_unknown);
}

TEST_CASE("reason catalog: names round-trip, refusals avoid statuses retry loops retry") {
  for (int i = 0; i <= static_cast<int>(ReasonCode::unclassified_fail_closed); ++i) {
    const auto code = static_cast<ReasonCode>(i);
    CHECK(parse_reason_code(to_string(code)) == code);
    CHECK_FALSE(question_for_human(code).empty());
    const int status = http_status_of(code);
    if (code != ReasonCode::ledger_unavailable) CHECK((status == 403 || status == 422));
  }
  CHECK(freezes_run(AnswerClass::auth));
  CHECK(freezes_run(AnswerClass::forbidden));
  CHECK_FALSE(freezes_run(AnswerClass::validation));
}
