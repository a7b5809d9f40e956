// SPEC section 2 as one function over plain data; see decide.hpp for the
// order of the steps and why each verdict is what it is.
#include "policy/decide.hpp"

#include <algorithm>

namespace idemgate::policy {
namespace {

using std::chrono::duration_cast;

Verdict refuse(ReasonCode reason, std::string detail, int http_status = 0) {
  Verdict v;
  v.kind = VerdictKind::refuse;
  v.reason = reason;
  v.http_status = http_status ? http_status : http_status_of(reason);
  v.terminal = terminal_of(reason);
  v.detail = std::move(detail);
  return v;
}

Verdict dispatch(DispatchKind kind, std::string key) {
  Verdict v;
  v.kind = VerdictKind::dispatch;
  v.dispatch_kind = kind;
  v.key = std::move(key);
  return v;
}

Verdict in_flight(Duration retry_after, std::string detail) {
  Verdict v;
  v.kind = VerdictKind::in_flight_409;
  v.http_status = 409;
  v.retry_after = retry_after;
  v.detail = std::move(detail);
  return v;
}

ReasonCode unknown_reason(const Tool& tool) {
  return tool.effect == Effect::money ? ReasonCode::money_unknown : ReasonCode::tool_outcome_unknown;
}

std::string attempts_text(int attempts, int bound) {
  return std::to_string(attempts) + " attempts, bound " + std::to_string(bound) + " retries";
}

// A retry of a retryable class: at the bound refuse, before Retry-After is
// over hold or answer 429, else send again with the ledger's key.
Verdict retry_or_wait(const Tool& tool, const IntentView& intent, Clock::time_point now) {
  if (intent.attempts > tool.retry.bound)
    return refuse(ReasonCode::tool_retry_exhausted,
                  "same fingerprint failed as " + std::string(to_string(intent.last_class)) + " after " +
                      attempts_text(intent.attempts, tool.retry.bound));
  if (intent.retry_not_before && *intent.retry_not_before > now) {
    // Never wait longer than the tool allows, whatever the ledger holds.
    const auto wait = std::min(duration_cast<Duration>(*intent.retry_not_before - now), tool.retry.max_retry_after);
    Verdict v;
    v.key = intent.key;
    v.retry_after = wait;
    if (tool.retry.retry_after == RetryAfterMode::hold) {
      v.kind = VerdictKind::hold;
      v.dispatch_kind = DispatchKind::retry;
      v.hold_until = now + wait;
      v.detail = "holding for the provider's Retry-After";
    } else {
      v.kind = VerdictKind::reject_429;
      v.http_status = 429;
      v.detail = "the provider asked to wait; retry after the time given";
    }
    return v;
  }
  return dispatch(DispatchKind::retry, intent.key);
}

Verdict decide_read(const Tool& tool, const DecisionInput& in) {
  const auto& intent = in.intent;
  const bool failing = intent.state == IntentState::denied || intent.state == IntentState::unknown ||
                       intent.state == IntentState::retryable;
  if (!failing) return dispatch(DispatchKind::new_intent, {});
  // Reads may be re-sent whatever the class, but the same failing fingerprint
  // is still bounded: that is no-progress, not persistence.
  auto verdict = retry_or_wait(tool, intent, in.now);
  if (verdict.kind == VerdictKind::dispatch) verdict.key.clear();  // reads carry no key
  return verdict;
}

Verdict decide_write(const Tool& tool, const DecisionInput& in, std::string_view agent_key) {
  const auto& intent = in.intent;
  if (in.run.state == RunState::frozen)
    return refuse(ReasonCode::run_frozen, "write tools of this run are frozen after an auth or permission failure");
  const auto& reconcile = tool.reconcile;
  switch (intent.state) {
    case IntentState::denied:
      return refuse(reason_for_denied(intent.last_class),
                    "this exact call was already answered " + std::string(to_string(intent.last_class)) +
                        "; repeating it cannot succeed");
    case IntentState::unknown: {
      const bool expired = in.now - intent.unknown_since > reconcile.ttl;
      if (reconcile.mode == ReconcileMode::none || expired || intent.attempts > tool.retry.bound)
        return refuse(unknown_reason(tool),
                      expired ? "the outcome is still unknown after reconcile.ttl; a human must check the provider"
                      : reconcile.mode == ReconcileMode::none
                          ? "the request was sent and no complete answer came back; this tool cannot be reconciled automatically"
                          : "re-sending the same key did not settle the outcome within the bound");
      Verdict v;
      v.kind = VerdictKind::reconcile;
      v.reconcile_mode = reconcile.mode;
      v.key = intent.key;
      v.detail = "the previous attempt's outcome is unknown; reconciling with the same key before anything else";
      return v;
    }
    case IntentState::in_flight:
      return in_flight(in.in_flight_retry_after, "the same call is being dispatched right now");
    case IntentState::retryable:
      break;
    case IntentState::none:
      // An agent's own key is kept (and bound to this fingerprint by the
      // caller); without one the caller mints a key before reserving.
      return dispatch(DispatchKind::new_intent, in.agent_key.present ? std::string(agent_key) : std::string());
    default:  // completed and unavailable are settled before writes are looked at
      break;
  }
  return retry_or_wait(tool, intent, in.now);
}

}  // namespace

Verdict decide(const Tool& tool, const DecisionInput& in, std::string_view agent_key) {
  const bool is_write = tool.effect != Effect::read;
  const auto& intent = in.intent;
  if (in.run.state == RunState::killed) return refuse(ReasonCode::run_killed, "the run was killed by an operator");
  if (is_write && intent.state == IntentState::completed) {
    Verdict v;
    v.kind = VerdictKind::replay;
    v.key = intent.key;
    v.detail = "this exact call already completed; replaying the stored answer";
    return v;
  }
  if (intent.state == IntentState::unavailable) {
    auto v = refuse(ReasonCode::ledger_unavailable, "the ledger could not record the intent; nothing was sent");
    v.retry_after = in.ledger_retry_after;
    return v;
  }
  if (tool.policy == PolicyAction::deny) return refuse(ReasonCode::policy_deny, "policy denies tool '" + tool.name + "'");
  if (tool.policy == PolicyAction::pending_approval && !intent.approved)
    return refuse(ReasonCode::pending_approval, "tool '" + tool.name + "' needs an operator's approval for this call");
  if (!in.missing_required.empty()) {
    std::string fields;
    for (const auto& pointer : in.missing_required) fields += (fields.empty() ? "" : ", ") + pointer;
    return refuse(ReasonCode::missing_slot, "required fields are missing: " + fields);
  }
  if (is_write && tool.idempotency.mode == KeyMode::require && !in.agent_key.present)
    return refuse(ReasonCode::missing_slot, "this tool requires the " + tool.idempotency.header + " header", 400);
  if (is_write && in.agent_key.bound_to_other_fingerprint)
    return refuse(ReasonCode::key_payload_mismatch, "the " + tool.idempotency.header +
                                                        " was already used with a different payload");
  if (is_write && in.agent_key.fingerprint_bound_to_other_key && tool.idempotency.binding == KeyBinding::strict)
    return refuse(ReasonCode::key_payload_mismatch,
                  "this payload was already sent with a different " + tool.idempotency.header + " (binding strict)");

  auto verdict = is_write ? decide_write(tool, in, agent_key) : decide_read(tool, in);
  const bool sends = verdict.kind == VerdictKind::dispatch || verdict.kind == VerdictKind::hold ||
                     verdict.kind == VerdictKind::reconcile;
  if (sends && in.run.calls_used >= in.run.budget)
    return refuse(ReasonCode::budget_exhausted, "the run used its budget of " + std::to_string(in.run.budget) + " calls");
  return verdict;
}

Verdict after_query(const Tool& tool, const IntentView& intent, QueryOutcome outcome,
                    Clock::time_point not_found_since, Clock::time_point now) {
  const auto& reconcile = tool.reconcile;
  if (now - intent.unknown_since > reconcile.ttl)
    return refuse(unknown_reason(tool), "the outcome is still unknown after reconcile.ttl; a human must check the provider");
  if (outcome == QueryOutcome::found) {
    Verdict v;
    v.kind = VerdictKind::replay;
    v.key = intent.key;
    v.detail = "the provider has the result of the earlier attempt; replaying it";
    return v;
  }
  const auto settled_for = outcome == QueryOutcome::not_found ? now - not_found_since : Clock::duration::zero();
  if (outcome == QueryOutcome::not_found && settled_for >= reconcile.settle)
    return dispatch(DispatchKind::retry, intent.key);
  return in_flight(duration_cast<Duration>(reconcile.settle - settled_for),
                   outcome == QueryOutcome::failed ? "the reconcile query failed; the outcome is still unknown"
                                                   : "the provider does not show the earlier attempt yet; waiting for it to settle");
}

std::string_view to_string(VerdictKind kind) noexcept {
  switch (kind) {
    case VerdictKind::dispatch: return "dispatch";
    case VerdictKind::replay: return "replay";
    case VerdictKind::reconcile: return "reconcile";
    case VerdictKind::hold: return "hold";
    case VerdictKind::reject_429: return "reject_429";
    case VerdictKind::refuse: return "refuse";
    case VerdictKind::in_flight_409: return "in_flight_409";
  }
  return "?";
}

}  // namespace idemgate::policy
