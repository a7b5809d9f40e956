// Everything a guarded call answers with, and its decision log line: the
// provider's answer, a replay, a wait (409/429 with Retry-After), a refusal
// with its escalation package (persisted before it is written), and the
// proxy's own transport problems. Every one carries the Idemgate-* headers.
#pragma once

#include "policy/decide.hpp"
#include "proxy/call.hpp"
#include "proxy/exchange.hpp"
#include "proxy/forward.hpp"
#include "ledger/executor.hpp"

#include <string_view>

namespace idemgate::proxy {

// A refusal verdict for a reason of the catalog (status, terminal from it).
policy::Verdict refusal(policy::ReasonCode reason, std::string detail);

Task<ForwardResult> answer_upstream(Call& call, UpstreamAnswer& answer);
// The stored response of call.intent (completed), or the operator's receipt.
Task<ForwardResult> answer_replay(Call& call);
Task<ForwardResult> answer_wait(Call& call, const policy::Verdict& verdict);
Task<ForwardResult> answer_refusal(Call& call, const policy::Verdict& verdict);
// The proxy's own problem about the transport (connect failed, TLS, ...),
// not a refusal: no package.
Task<ForwardResult> answer_problem(Call& call, const Problem& problem);
// The ledger failed: 503 when this request sent nothing; once an attempt
// began, the outcome is unknown and the answer says so (409 reconciling).
Task<ForwardResult> answer_ledger_down(Call& call);

void log_decision(Call& call, unsigned status);

}  // namespace idemgate::proxy
