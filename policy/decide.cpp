// SPEC section 2 as one function over plain data; see decide.hpp for the
// order of the steps and why each verdict is what it is.
#include "policy/decide.hpp"

#include <algorithm>

namespace idemgate::policy {
namespace {

using std::chrono::duration_cast;
using namespace std::chrono_literals;

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

Verdict wait(WaitReason reason, Duration retry_after, std::string detail) {
  Verdict v;
  v.kind = VerdictKind::wait;
  v.wait_reason = reason;
  v.http_status = reason == WaitReason::retry_after ? 429 : 409;
  v.retry_after = std::max<Duration>(retry_after, 1s);
  v.detail = std::move(detail);
  return v;
}

Verdict hold(Clock::time_point until, std::string key, std::string detail) {
  Verdict v;
  v.kind = VerdictKind::hold;
  v.dispatch_kind = DispatchKind::retry;
  v.key = std::move(key);
  v.hold_until = until;
  v.detail = std::move(detail);
  return v;
}

// Hold until `until` when reconcile.inline lasts that long, else tell the
// agent to come back then.
Verdict hold_or_wait(const DecisionInput& in, Clock::time_point until, WaitReason reason, std::string detail) {
  const auto left = duration_cast<Duration>(until - in.now);
  if (left <= in.inline_left) return hold(until, in.intent.key, std::move(detail));
  return wait(reason, std::min<Duration>(left, reason == WaitReason::in_flight ? 1s : left), std::move(detail));
}

ReasonCode unknown_reason(const Tool& tool) {
  return tool.effect == Effect::money ? ReasonCode::money_unknown : ReasonCode::tool_outcome_unknown;
}

std::string attempts_text(int attempts, int bound) {
  return std::to_string(attempts) + " attempts, bound " + std::to_string(bound) + " retries";
}

std::string seconds_text(Duration d) { return std::to_string((d.count() + 999) / 1000) + " s"; }

// A retry of a retryable class: at the bound refuse; a Retry-After past
// max_retry_after is answered whole; a shorter one is held or answered 429;
// else send again with the ledger's key.
Verdict retry_or_wait(const Tool& tool, const IntentView& intent, Clock::time_point now) {
  if (intent.attempts > tool.retry.bound)
    return refuse(ReasonCode::tool_retry_exhausted,
                  "same fingerprint failed as " + std::string(to_string(intent.last_class)) + " after " +
                      attempts_text(intent.attempts, tool.retry.bound));
  if (intent.retry_not_before && *intent.retry_not_before > now) {
    const auto left = duration_cast<Duration>(*intent.retry_not_before - now);
    if (left > tool.retry.max_retry_after)
      return wait(WaitReason::retry_after, left,
                  "the provider asked to wait " + seconds_text(left) + ", longer than retry.max_retry_after (" +
                      seconds_text(tool.retry.max_retry_after) + "); nothing is re-sent before then");
    if (tool.retry.retry_after == RetryAfterMode::hold)
      return hold(*intent.retry_not_before, intent.key, "holding for the provider's Retry-After");
    return wait(WaitReason::retry_after, left, "the provider asked to wait; retry after the time given");
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
  if (verdict.kind == VerdictKind::dispatch || verdict.kind == VerdictKind::hold) verdict.key.clear();  // reads carry no key
  return verdict;
}

// An unknown outcome: reconcile (in this request while reconcile.inline
// lasts, backing off between rounds), or escalate when it cannot be.
Verdict decide_unknown(const Tool& tool, const DecisionInput& in) {
  const auto& intent = in.intent;
  const auto& reconcile = tool.reconcile;
  const bool expired = in.now - intent.unknown_since > reconcile.ttl;
  if (reconcile.mode == ReconcileMode::none || expired || intent.attempts > tool.retry.bound)
    return refuse(unknown_reason(tool),
                  expired ? "the request was sent and its outcome is still unknown after reconcile.ttl (" +
                                seconds_text(reconcile.ttl) + "); a human must check the provider"
                  : reconcile.mode == ReconcileMode::none
                      ? std::string("the request was sent and no complete answer came back; this tool cannot be "
                                    "reconciled automatically (reconcile.mode none)")
                      : "the request was sent and re-sending the same key did not settle the outcome within the "
                        "bound (" + attempts_text(intent.attempts, tool.retry.bound) + ")");
  const char* still = "the request was sent and its outcome is not known yet; idemgate reconciles it with the "
                      "provider before anything is re-sent, so retrying is safe";
  if (intent.retry_not_before && *intent.retry_not_before > in.now)  // the provider said "not now" to a re-send
    return hold_or_wait(in, *intent.retry_not_before, WaitReason::reconciling, still);
  if (in.rounds > 0 && in.last_round_end) {
    const auto not_before = *in.last_round_end + reconcile_backoff(in.rounds);
    if (not_before > in.now && !(reconcile.mode == ReconcileMode::query && in.query))
      return hold_or_wait(in, not_before, WaitReason::reconciling, still);
  }
  if (reconcile.mode == ReconcileMode::same_key || !in.query) {
    Verdict v;
    v.kind = VerdictKind::reconcile;
    v.reconcile_mode = reconcile.mode;
    v.key = intent.key;
    v.detail = reconcile.mode == ReconcileMode::same_key
                   ? "the previous attempt's outcome is unknown; re-sending the same key, which the provider honours"
                   : "the previous attempt's outcome is unknown; asking the provider with reconcile.query";
    return v;
  }
  switch (*in.query) {
    case QueryOutcome::found: {
      Verdict v;
      v.kind = VerdictKind::replay;
      v.key = intent.key;
      v.detail = "the provider has the result of the earlier attempt";
      return v;
    }
    case QueryOutcome::not_found: {
      const auto settled_for = duration_cast<Duration>(in.now - intent.unknown_since);
      if (settled_for >= reconcile.settle) return dispatch(DispatchKind::retry, intent.key);
      return hold_or_wait(in, intent.unknown_since + reconcile.settle, WaitReason::reconciling,
                          "the provider does not show the earlier attempt yet; it is given reconcile.settle (" +
                              seconds_text(reconcile.settle) + ") before the same key is re-sent");
    }
    case QueryOutcome::failed:
      break;
  }
  return hold_or_wait(in, in.now + reconcile_backoff(in.rounds), WaitReason::reconciling,
                      "the reconcile query failed; the outcome is still unknown and nothing is re-sent");
}

Verdict decide_write(const Tool& tool, const DecisionInput& in, std::string_view agent_key) {
  const auto& intent = in.intent;
  if (in.run.state == RunState::frozen)
    return refuse(ReasonCode::run_frozen, "write tools of this run are frozen after an auth or permission failure");
  switch (intent.state) {
    case IntentState::denied:
      return refuse(reason_for_denied(intent.last_class),
                    "this exact call was already answered " + std::string(to_string(intent.last_class)) +
                        "; repeating it cannot succeed");
    case IntentState::unknown:
      return decide_unknown(tool, in);
    case IntentState::in_flight: {
      // Owned by the process that began it until its lease ends: poll here
      // while reconcile.inline lasts.
      const auto poll = std::min<Duration>(reconcile_backoff(in.rounds), in.inline_left);
      const auto lease_left = intent.lease_until ? duration_cast<Duration>(*intent.lease_until - in.now) : 1s;
      if (in.inline_left > Duration::zero())
        return hold(in.now + std::max<Duration>(poll, 1ms), intent.key, "the same call is being dispatched right now");
      return wait(WaitReason::in_flight, std::clamp<Duration>(lease_left, 1s, 2s),
                  "the same call is being dispatched right now; its answer will be replayed");
    }
    case IntentState::retryable:
      break;
    case IntentState::none:
      if (in.validation_failures >= 2)
        return refuse(ReasonCode::validation_repeated,
                      "tool '" + tool.name + "' already failed validation with two payloads in this run");
      // An agent's own key is kept (and bound to this fingerprint by the
      // caller); without one the caller mints a key before reserving.
      return dispatch(DispatchKind::new_intent, in.agent_key.present ? std::string(agent_key) : std::string());
    default:  // completed and unavailable are settled before writes are looked at
      break;
  }
  return retry_or_wait(tool, intent, in.now);
}

}  // namespace

Duration reconcile_backoff(int rounds) noexcept {
  Duration d = 250ms;
  for (int i = 1; i < rounds && d < 2s; ++i) d *= 2;
  return std::min<Duration>(d, 2s);
}

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
    auto v = refuse(ReasonCode::ledger_unavailable,
                    "the ledger could not be read or written; this request sent nothing upstream");
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
  const bool sends = verdict.kind == VerdictKind::dispatch || verdict.kind == VerdictKind::reconcile;
  if (sends && in.run.calls_used >= in.run.budget)
    return refuse(ReasonCode::budget_exhausted, "the run used its budget of " + std::to_string(in.run.budget) + " calls");
  return verdict;
}

std::string_view to_string(VerdictKind kind) noexcept {
  switch (kind) {
    case VerdictKind::dispatch: return "dispatch";
    case VerdictKind::replay: return "replay";
    case VerdictKind::reconcile: return "reconcile";
    case VerdictKind::hold: return "hold";
    case VerdictKind::wait: return "wait";
    case VerdictKind::refuse: return "refuse";
  }
  return "?";
}

std::string_view to_string(WaitReason reason) noexcept {
  switch (reason) {
    case WaitReason::in_flight: return "in_flight";
    case WaitReason::reconciling: return "reconciling";
    case WaitReason::retry_after: return "retry_after";
  }
  return "?";
}

}  // namespace idemgate::policy
