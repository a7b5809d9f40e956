// The reason catalog: spellings, terminals, statuses and questions.
#include "policy/reason.hpp"

#include <array>

namespace idemgate::policy {
namespace {

struct ReasonInfo {
  std::string_view name;
  int http_status;
  std::string_view question;
};

// Indexed by ReasonCode.
constexpr std::array<ReasonInfo, 19> reasons{{
    {"tool_auth_error", 403, "The tool's credentials were rejected (401). Rotate or fix them, then unfreeze the run."},
    {"tool_forbidden", 403, "The credentials lack permission or scope for this call (403). Grant it or change the task?"},
    {"policy_deny", 403, "Policy denies this tool. Is this work out of the job's contract?"},
    {"pending_approval", 403, "This tool needs approval. Approve or deny this exact call in the escalation queue."},
    {"missing_slot", 422, "Required fields are missing from the call. What values should they have?"},
    {"tool_retry_exhausted", 422, "The same call failed the same way up to the retry bound. Is the provider down, or is the call wrong?"},
    {"money_unknown", 422, "A money movement may or may not have happened. Check the provider's dashboard and record the outcome."},
    {"tool_outcome_unknown", 422, "A write may or may not have happened. Check the provider and record the outcome."},
    {"money_rejected", 422, "The provider declined the money movement. Should it be attempted differently, or not at all?"},
    {"validation_repeated", 422, "The provider rejected this payload as invalid. What should the corrected payload be?"},
    {"key_payload_mismatch", 422, "An idempotency key was reused for a different payload. Which payload is intended?"},
    {"budget_exhausted", 403, "The run used its whole call budget. Raise the budget or end the run?"},
    {"run_frozen", 403, "Write tools of this run are frozen after an auth failure. Fix the credentials and unfreeze the run."},
    {"run_killed", 403, "The run was killed by an operator. No further calls are allowed."},
    {"ledger_unavailable", 503, "The ledger cannot be written, so nothing was sent. Is the database up?"},
    {"overloaded", 503, "idemgate holds as many guarded answers in memory as its budget allows, so nothing was sent. Raise limits or add capacity?"},
    {"egress_denied", 403, "The destination is not in egress.allow_hosts or resolves to a forbidden address. Should it be allowed?"},
    {"intercept_required", 403, "This host has tools but TLS interception is off (tls.intercept), so its calls cannot be guarded. Turn interception on?"},
    {"unclassified_fail_closed", 422, "The provider's answer fits no known class. What does it mean for this tool?"},
}};

const ReasonInfo& info(ReasonCode code) noexcept { return reasons[static_cast<std::size_t>(code)]; }

}  // namespace

std::string_view to_string(ReasonCode code) noexcept { return info(code).name; }

std::optional<ReasonCode> parse_reason_code(std::string_view text) noexcept {
  for (std::size_t i = 0; i < reasons.size(); ++i)
    if (reasons[i].name == text) return static_cast<ReasonCode>(i);
  return std::nullopt;
}

std::string_view to_string(Terminal terminal) noexcept {
  return terminal == Terminal::abort ? "abort" : "escalate";
}

Terminal terminal_of(ReasonCode code) noexcept {
  switch (code) {
    case ReasonCode::run_killed:
    case ReasonCode::policy_deny:
    case ReasonCode::egress_denied:
    case ReasonCode::intercept_required: return Terminal::abort;
    default: return Terminal::escalate;
  }
}

int http_status_of(ReasonCode code) noexcept { return info(code).http_status; }

std::string_view question_for_human(ReasonCode code) noexcept { return info(code).question; }

ReasonCode reason_for_denied(AnswerClass answer_class) noexcept {
  switch (answer_class) {
    case AnswerClass::auth: return ReasonCode::tool_auth_error;
    case AnswerClass::forbidden: return ReasonCode::tool_forbidden;
    case AnswerClass::validation: return ReasonCode::validation_repeated;
    case AnswerClass::money_rejected: return ReasonCode::money_rejected;
    case AnswerClass::policy_deny: return ReasonCode::policy_deny;
    case AnswerClass::unclassified: return ReasonCode::unclassified_fail_closed;
    // not_found, conflict, and a provider's "do not retry": the allowance
    // for repeating a non-retryable answer is zero.
    default: return ReasonCode::tool_retry_exhausted;
  }
}

bool freezes_run(AnswerClass answer_class) noexcept {
  return answer_class == AnswerClass::auth || answer_class == AnswerClass::forbidden;
}

}  // namespace idemgate::policy
