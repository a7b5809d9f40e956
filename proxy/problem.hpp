// RFC 9457 problem details: every answer the proxy writes itself is one,
// with a reason_code a machine can switch on.
#pragma once

#include <boost/json/object.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace idemgate::proxy {

struct Problem {
  unsigned status = 500;
  std::string reason_code;
  std::string title;
  std::string detail;
  std::optional<unsigned> retry_after_s{};  // also sent as Retry-After
  boost::json::object extra{};               // further members (tool, run, ...)
};

// The JSON body, with type "urn:idemgate:problem:<reason_code>". Besides the
// RFC 9457 members it carries `error: {type, code, message}`: Stripe-style
// and OpenAI-style SDKs raise only when the body has an `error` member, so
// without it they would take a refusal for a successful object.
std::string problem_json(const Problem&);
boost::json::object problem_object(const Problem&);

// error.type: "idemgate_refusal" (a package with a terminal), "idemgate_wait"
// (in_flight, reconciling, retry_after: a retry is safe later), else
// "idemgate_error" (the proxy's own errors: malformed request, upstream
// unreachable, ...).
std::string_view problem_error_type(const Problem&);

// error.message: one sentence a model or a log reader can act on: the title
// and detail, then the question for a human, the key and attempts/bound
// when the problem has them.
std::string problem_message(const Problem&);

// Canned problems for the proxy's own errors.
Problem bad_request(std::string detail);
Problem upstream_connect_failed(std::string detail);
Problem upstream_timed_out(std::string detail);
// 403: the egress guard refused the host or an address it resolves to;
// nothing was sent.
Problem egress_denied(std::string detail);
// 403 policy_deny: the path has no single reading (%2F, %5C, '\\' or
// ";params") and one reading is a call of write tool `tool`; nothing was sent.
Problem ambiguous_spelling(std::string_view method, std::string_view url, std::string_view reading,
                           std::string_view tool);
// A write whose JSON body names a member twice in one object: 403
// policy_deny (terminal abort), answered without the ledger, nothing sent.
Problem ambiguous_body(std::string_view tool);
// 502: the upstream's TLS handshake or certificate check failed; never
// followed by a plain-text attempt.
Problem upstream_tls_failed(std::string detail);

}  // namespace idemgate::proxy
