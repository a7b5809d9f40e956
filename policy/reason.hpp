// The refusal reason catalog of SPEC section 4, the terminal each one leads
// to, and the status and question a refusal carries by default.
#pragma once

#include "policy/tool.hpp"

#include <optional>
#include <string_view>

namespace idemgate::policy {

enum class ReasonCode {
  tool_auth_error,
  tool_forbidden,
  policy_deny,
  pending_approval,
  missing_slot,
  tool_retry_exhausted,
  money_unknown,
  tool_outcome_unknown,
  money_rejected,
  validation_repeated,
  key_payload_mismatch,
  budget_exhausted,
  run_frozen,
  run_killed,
  ledger_unavailable,
  overloaded,
  egress_denied,
  intercept_required,
  unclassified_fail_closed,
};

// What the agent's harness should do next: hand over to a human, or stop
// because the work itself is not allowed.
enum class Terminal { escalate, abort };

std::string_view to_string(ReasonCode) noexcept;
std::optional<ReasonCode> parse_reason_code(std::string_view) noexcept;
std::string_view to_string(Terminal) noexcept;

// abort for run_killed, policy_deny and egress_denied (illegal work: do not
// page a human to finish it); escalate for the rest.
Terminal terminal_of(ReasonCode) noexcept;

// 503 for ledger_unavailable, 403 for refusals of permission (auth,
// forbidden, policy, approval, run state, budget, egress), 422 for the rest.
// Never a status that client retry loops retry (408, 409, 429, 5xx) except
// ledger_unavailable, where nothing was sent and a retry is safe.
int http_status_of(ReasonCode) noexcept;

// The one question the human must answer, for the problem+json package.
std::string_view question_for_human(ReasonCode) noexcept;

// The reason a repeat of a write that ended in `answer_class` is refused.
ReasonCode reason_for_denied(AnswerClass answer_class) noexcept;

// Does an answer of this class freeze the run's write tools? (auth, forbidden)
bool freezes_run(AnswerClass answer_class) noexcept;

}  // namespace idemgate::policy
