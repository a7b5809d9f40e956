// decide(), table-driven: one row per branch of SPEC
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
      {"in flight on any replica, no inline time left: wait 409 with Retry-After", money,
       input_with(intent(IntentState::in_flight)), VerdictKind::wait, {}, 409, "", {}, Duration(1s)},
      {"in flight with reconcile.inline left: hold (poll), then decide again", money,
       changed(input_with(intent(IntentState::in_flight)), [](auto& in) { in.inline_left = 10s; }),
       VerdictKind::hold, {}, 0, "idem_ledger_key"},
      {"retryable below the bound: dispatch again with the same key", money,
       input_with(intent(IntentState::retryable, AnswerClass::transient, 2)), VerdictKind::dispatch, {}, 0, "idem_ledger_key"},
      {"retryable with Retry-After not over: hold, then the same key", money,
       changed(input_with(intent(IntentState::retryable, AnswerClass::rate_limited, 1)),
               [](auto& in) { in.intent.retry_not_before = now + 5s; }),
       VerdictKind::hold, {}, 0, "idem_ledger_key"},
      {"retryable with Retry-After, mode reject: 429 with the time left",
       changed(money, [](auto& t) { t.retry.retry_after = RetryAfterMode::reject; }),
       changed(input_with(intent(IntentState::retryable, AnswerClass::rate_limited, 1)),
               [](auto& in) { in.intent.retry_not_before = now + 5s; }),
       VerdictKind::wait, {}, 429, "", {}, Duration(5s)},
      {"Retry-After past max_retry_after: never held, never cut short: 429 with the full time left", money,
       changed(input_with(intent(IntentState::retryable, AnswerClass::rate_limited, 1)),
               [](auto& in) { in.intent.retry_not_before = now + 1h; }),
       VerdictKind::wait, {}, 429, "", {}, Duration(1h)},
      {"a new intent of a run that failed validation with two payloads: refuse validation_repeated", write,
       changed(none, [](auto& in) { in.validation_failures = 2; }), VerdictKind::refuse,
       ReasonCode::validation_repeated, 422},
      {"one earlier validation failure in the run: the corrected payload is sent", write,
       changed(none, [](auto& in) { in.validation_failures = 1; }), VerdictKind::dispatch},
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

Verdict check_row(const Row& row) {
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
  return verdict;
}

TEST_CASE("decide: every row of SPEC section 2") {
  for (const auto& row : rows()) {
    SUBCASE(row.name) { check_row(row); }
  }
}

std::vector<Row> reconciliation_rows() {
  const Tool query = changed(money, [](auto& t) { t.reconcile.mode = ReconcileMode::query; });
  const auto unknown = input_with(intent(IntentState::unknown, AnswerClass::unknown));
  auto asked = [&](QueryOutcome outcome, Clock::time_point unknown_since, Duration inline_left) {
    return changed(unknown, [=](auto& in) {
      in.query = outcome;
      in.intent.unknown_since = unknown_since;
      in.inline_left = inline_left;
      in.rounds = 1;
      in.last_round_end = now;
    });
  };
  const auto after_a_round = changed(unknown, [](auto& in) {
    in.rounds = 1;
    in.last_round_end = now - 100ms;
  });
  return {
      {"same_key, a round earlier in this request: back off (hold) while inline lasts", money,
       changed(after_a_round, [](auto& in) { in.inline_left = 5s; }), VerdictKind::hold, {}, 0, "idem_ledger_key"},
      {"same_key, a round earlier, no inline time left: wait 409 reconciling", money, after_a_round,
       VerdictKind::wait, {}, 409, "", {}, Duration(1s)},
      {"same_key, backoff over: re-send the key", money,
       changed(unknown, [](auto& in) { in.rounds = 1; in.last_round_end = now - 1s; }), VerdictKind::reconcile, {}, 0,
       "idem_ledger_key"},
      {"the provider said 'not now' to a re-send: wait for it while reconciling", money,
       changed(unknown, [](auto& in) { in.intent.retry_not_before = now + 30s; }), VerdictKind::wait, {}, 409, "",
       {}, Duration(30s)},
      {"query, not asked yet in this request: look it up", query, unknown, VerdictKind::reconcile, {}, 0,
       "idem_ledger_key"},
      {"query found: replay what the provider has", query, asked(QueryOutcome::found, now - 1min, 0s),
       VerdictKind::replay, {}, 0, "idem_ledger_key"},
      {"query not found for settle: re-send the same key", query, asked(QueryOutcome::not_found, now - 31s, 0s),
       VerdictKind::dispatch, {}, 0, "idem_ledger_key"},
      {"query not found, settle ends inside reconcile.inline: hold until it does", query,
       asked(QueryOutcome::not_found, now - 25s, 10s), VerdictKind::hold, {}, 0, "idem_ledger_key"},
      {"query not found, settle ends after reconcile.inline: wait 409 reconciling with the time left", query,
       asked(QueryOutcome::not_found, now - 10s, 5s), VerdictKind::wait, {}, 409, "", {}, Duration(20s)},
      {"query failed, no inline time left: wait 409 reconciling", query, asked(QueryOutcome::failed, now - 1min, 0s),
       VerdictKind::wait, {}, 409, "", {}, Duration(1s)},
      {"query past reconcile.ttl: escalate money_unknown", query,
       asked(QueryOutcome::not_found, now - 16min, 10s), VerdictKind::refuse, ReasonCode::money_unknown, 422},
  };
}

TEST_CASE("decide: reconciling an unknown outcome inside the request") {
  for (const auto& row : reconciliation_rows()) {
    SUBCASE(row.name) {
      const auto verdict = check_row(row);
      if (verdict.kind == VerdictKind::wait) CHECK(to_string(verdict.wait_reason) == "reconciling");
    }
  }
}

TEST_CASE("reconcile_backoff: 250 ms doubling to 2 s") {
  CHECK(reconcile_backoff(0) == 250ms);
  CHECK(reconcile_backoff(1) == 250ms);
  CHECK(reconcile_backoff(2) == 500ms);
  CHECK(reconcile_backoff(4) == 2s);
  CHECK(reconcile_backoff(40) == 2s);
}

TEST_CASE("reason catalog: names round-trip, refusals avoid statuses retry loops retry") {
  for (int i = 0; i <= static_cast<int>(ReasonCode::unclassified_fail_closed); ++i) {
    const auto code = static_cast<ReasonCode>(i);
    CHECK(parse_reason_code(to_string(code)) == code);
    CHECK_FALSE(question_for_human(code).empty());
    const int status = http_status_of(code);
    if (code != ReasonCode::ledger_unavailable && code != ReasonCode::overloaded) CHECK((status == 403 || status == 422));
  }
  CHECK(freezes_run(AnswerClass::auth));
  CHECK(freezes_run(AnswerClass::forbidden));
  CHECK_FALSE(freezes_run(AnswerClass::validation));
}
