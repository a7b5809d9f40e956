// The plain data a tool's policy is made of: what the config loader fills in
// and what match, classify, fingerprint and decide read. No behaviour here.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idemgate::policy {

using Duration = std::chrono::milliseconds;

// What a call does to the world.
enum class Effect { read, write, money };

// The typed class of an answer (SPEC section 3).
enum class AnswerClass {
  ok,
  rate_limited,
  transient,
  unknown,
  auth,
  forbidden,
  not_found,
  validation,
  conflict,
  money_rejected,
  policy_deny,
  // A status no rule or table row covers (418, 501, ...): fails closed, not
  // retryable, refused as unclassified_fail_closed.
  unclassified,
};

// How the idempotency key reaches the provider.
enum class KeyMode { inject, require, passthrough };

// An agent-supplied key that differs from the one already bound to the same
// fingerprint: re-send the original (enforce) or refuse (strict).
enum class KeyBinding { enforce, strict };

enum class ReconcileMode { same_key, query, none };
enum class RetryAfterMode { hold, reject };
enum class PolicyAction { allow, deny, pending_approval };

// Whose writes are compared when deciding "same intent": one run's, or all.
enum class FingerprintScope { run, global };

enum class Unmatched { pass, deny };

// Proxy authentication (config auth.mode): off, or Proxy-Authorization required.
enum class AuthMode { off, required };

struct MatchSpec {
  std::string host;       // exact or glob ("*.stripe.com"); lowercase
  std::uint16_t port = 0; // 0: any
  std::string method;     // empty: any; uppercase
  std::string path;       // exact, "prefix*", or "/v1/{param}/x"
  std::string mcp_tool;   // JSON-RPC tools/call params.name; empty: not MCP
  // Query conditions, all of which must hold: "name" (present) or
  // "name=value" (equal after percent-decoding). Empty: any query.
  std::vector<std::string> query;
};

struct IdempotencySpec {
  std::string header = "Idempotency-Key";
  KeyMode mode = KeyMode::inject;
  KeyBinding binding = KeyBinding::enforce;
  // Does the provider deduplicate on the header? Without it a 5xx on a write
  // is unknown, not transient (the effect may have happened).
  bool honoured = true;
};

struct FingerprintSpec {
  std::vector<std::string> ignore;        // JSON pointers into the body
  std::vector<std::string> ignore_query;  // query parameters left out
  std::vector<std::string> headers;       // request headers that take part
  FingerprintScope scope = FingerprintScope::run;
  Duration window = std::chrono::hours(24);
};

struct RetrySpec {
  int bound = 2;  // retries of one retryable fingerprint after the first try
  RetryAfterMode retry_after = RetryAfterMode::hold;
  Duration max_retry_after = std::chrono::seconds(60);
};

// A per-tool override: when status (and, if set, a header value) match,
// the answer has this class.
struct ClassifyRule {
  std::optional<int> status{};
  std::string header{};        // empty: no header condition
  std::string header_value{};  // compared case-insensitively
  AnswerClass answer_class = AnswerClass::ok;
};

struct ReconcileQuery {
  std::string method = "GET";
  std::string url;    // templated: {key}, {receipt}, {/json/pointer}
  std::string found;  // JSON pointer that must exist in the answer
};

struct ReconcileSpec {
  ReconcileMode mode = ReconcileMode::same_key;
  Duration ttl = std::chrono::minutes(15);
  Duration settle = std::chrono::seconds(30);
  // How long idemgate reconciles inside the agent's request (re-send the
  // key, or look it up) before answering "still reconciling"; 0: never.
  Duration inline_budget = std::chrono::seconds(10);
  ReconcileQuery query;
};

struct Tool {
  std::string name;
  MatchSpec match;
  Effect effect = Effect::read;
  IdempotencySpec idempotency;
  FingerprintSpec fingerprint;
  RetrySpec retry;
  std::vector<ClassifyRule> classify;
  ReconcileSpec reconcile;
  std::string receipt;               // JSON pointer into the answer
  std::vector<std::string> require;  // JSON pointers that must be present
  PolicyAction policy = PolicyAction::allow;
  // A header that overrides the status ("Stripe-Should-Retry: true|false").
  std::string should_retry_header = "Stripe-Should-Retry";
  int source_line = 0;  // where the tool was declared, for messages
};

std::string_view to_string(Effect) noexcept;
std::string_view to_string(AnswerClass) noexcept;
std::string_view to_string(KeyMode) noexcept;
std::string_view to_string(ReconcileMode) noexcept;
std::string_view to_string(PolicyAction) noexcept;
std::optional<AnswerClass> parse_answer_class(std::string_view) noexcept;

}  // namespace idemgate::policy
