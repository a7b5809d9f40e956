// The classifier: a pure function from what came back (a status and headers,
// or a transport outcome) and the tool to a typed answer class, whether a
// retry with the same key can help, and how long to wait first.
//
// Order, first that applies wins:
//   1. Transport outcome: connect_failed (nothing was sent) -> transient;
//      sent_no_answer (timeout or reset after the request left) -> unknown.
//   2. The tool's `classify:` rules, in the order written.
//   3. The should-retry header (tool.should_retry_header, by default
//      Stripe-Should-Retry) on a non-2xx answer:
//        true  -> the status class if it is retryable, else transient;
//        false -> the status class if it is not retryable, else
//                 money_rejected for a money tool and conflict for others
//                 (the provider says a second identical call cannot succeed).
//   4. A 5xx on a write or money tool whose key the provider does not honour
//      (idempotency.honoured false) -> unknown: the effect may have happened.
//   5. The status table of SPEC section 3: 2xx/3xx ok; 429 rate_limited; 503
//      with a Retry-After rate_limited, without transient; 500/502/504
//      transient; 401 auth; 403 forbidden; 404 not_found; 400/422
//      validation; 409 conflict; 402 money_rejected; any other status
//      unclassified (fails closed).
//
// should_retry is true for rate_limited and transient, and for unknown on a
// read tool (no side effect to duplicate). An unknown write is never retried
// blindly: decide() reconciles it first.
#pragma once

#include "policy/headers.hpp"
#include "policy/tool.hpp"

#include <chrono>
#include <optional>
#include <string_view>

namespace idemgate::policy {

enum class TransportOutcome {
  answered,        // a complete status line and headers came back
  connect_failed,  // no byte of the request was sent
  sent_no_answer,  // the request (or part of it) left; no complete answer
};

struct Answer {
  TransportOutcome outcome = TransportOutcome::answered;
  int status = 0;      // when answered
  HeaderView headers{};  // when answered
};

struct Classification {
  AnswerClass answer_class = AnswerClass::unclassified;
  bool should_retry = false;
  // From Retry-After (seconds or HTTP-date, a date in the past is zero),
  // whole: a wait past retry.max_retry_after is never cut short.
  std::optional<Duration> retry_after;
  bool retry_after_capped = false;  // the provider asked for longer than max_retry_after
  std::string_view reason;          // which step decided, for logs: "status table", "tool classify rule", ...
};

Classification classify(const Answer& answer, const Tool& tool,
                        std::chrono::system_clock::time_point now) noexcept;

// Retry-After as delta-seconds or an HTTP-date (IMF-fixdate, RFC 850 or
// asctime), relative to `now`; nullopt when malformed. Not capped.
std::optional<Duration> parse_retry_after(std::string_view value,
                                          std::chrono::system_clock::time_point now) noexcept;

// Can another attempt with the same key change the outcome?
bool is_retryable(AnswerClass answer_class) noexcept;

}  // namespace idemgate::policy
