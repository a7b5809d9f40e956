// The classifier, one test case per row of the seed tables in
// shared/seeds/retry-or-escalate.txt and of SPEC section 3. Case names are
// "<table>: <row>" so a failing row is found by its seed text.
#include "policy/classify.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace idemgate::policy;
using namespace std::chrono;

namespace {

// 2026-11-30 12:00:00 UTC: the fixed "now" every row is judged at.
const system_clock::time_point now = sys_days{2026y / November / 30} + 12h;

struct Row {
  TransportOutcome outcome = TransportOutcome::answered;
  int status = 0;
  std::vector<Header> headers{};
  Effect effect = Effect::write;
  bool key_honoured = true;
  std::vector<ClassifyRule> rules{};
  // expected
  AnswerClass answer_class = AnswerClass::unclassified;
  bool should_retry = false;
  std::optional<Duration> retry_after = std::nullopt;
};

void check_row(const Row& row) {
  Tool tool;
  tool.name = "t";
  tool.effect = row.effect;
  tool.idempotency.honoured = row.key_honoured;
  tool.classify = row.rules;
  tool.retry.max_retry_after = 60s;
  const auto result = classify({row.outcome, row.status, row.headers}, tool, now);
  INFO("reason: " << result.reason);
  CHECK(to_string(result.answer_class) == to_string(row.answer_class));
  CHECK(result.should_retry == row.should_retry);
  CHECK(result.retry_after == row.retry_after);
}

}  // namespace

#define CLASSIFIER_ROW(name, ...) \
  TEST_CASE(name) { check_row(Row __VA_ARGS__); }

// Table "Signal / Retry? / Escalate?"
CLASSIFIER_ROW("signal: 429 with Retry-After past max_retry_after is kept whole (never cut short)",
               {.status = 429, .headers = {{"Retry-After", "120"}}, .answer_class = AnswerClass::rate_limited,
                .should_retry = true, .retry_after = 120s})
CLASSIFIER_ROW("signal: 429 with Retry-After HTTP-date",
               {.status = 429, .headers = {{"retry-after", "Mon, 30 Nov 2026 12:00:30 GMT"}},
                .answer_class = AnswerClass::rate_limited, .should_retry = true, .retry_after = 30s})
CLASSIFIER_ROW("signal: 429 without Retry-After",
               {.status = 429, .answer_class = AnswerClass::rate_limited, .should_retry = true})
CLASSIFIER_ROW("signal: 503 with Retry-After is rate_limited",
               {.status = 503, .headers = {{"Retry-After", "5"}}, .answer_class = AnswerClass::rate_limited,
                .should_retry = true, .retry_after = 5s})
CLASSIFIER_ROW("signal: 503 without Retry-After is transient",
               {.status = 503, .answer_class = AnswerClass::transient, .should_retry = true})
CLASSIFIER_ROW("signal: timeout / connect reset on a read (nothing sent)",
               {.outcome = TransportOutcome::connect_failed, .effect = Effect::read,
                .answer_class = AnswerClass::transient, .should_retry = true})
CLASSIFIER_ROW("signal: timeout on a read after sending is unknown but retryable",
               {.outcome = TransportOutcome::sent_no_answer, .effect = Effect::read,
                .answer_class = AnswerClass::unknown, .should_retry = true})
CLASSIFIER_ROW("signal: timeout on a write with a stored idempotency key",
               {.outcome = TransportOutcome::sent_no_answer, .effect = Effect::write,
                .answer_class = AnswerClass::unknown, .should_retry = false})
CLASSIFIER_ROW("signal: timeout on a write with no key",
               {.outcome = TransportOutcome::sent_no_answer, .effect = Effect::write, .key_honoured = false,
                .answer_class = AnswerClass::unknown, .should_retry = false})
CLASSIFIER_ROW("signal: connect failure on a write (nothing sent) is transient",
               {.outcome = TransportOutcome::connect_failed, .effect = Effect::money,
                .answer_class = AnswerClass::transient, .should_retry = true})
CLASSIFIER_ROW("signal: 401 unauthorized",
               {.status = 401, .answer_class = AnswerClass::auth, .should_retry = false})
CLASSIFIER_ROW("signal: 403 forbidden / missing scope",
               {.status = 403, .answer_class = AnswerClass::forbidden, .should_retry = false})
CLASSIFIER_ROW("signal: 404 is a stop, not a clock",
               {.status = 404, .answer_class = AnswerClass::not_found, .should_retry = false})
CLASSIFIER_ROW("signal: 422 schema / validation fail",
               {.status = 422, .answer_class = AnswerClass::validation, .should_retry = false})
CLASSIFIER_ROW("signal: unknown error class defaults to retryable false",
               {.status = 418, .answer_class = AnswerClass::unclassified, .should_retry = false})
CLASSIFIER_ROW("signal: 501 is not in the table and fails closed",
               {.status = 501, .answer_class = AnswerClass::unclassified, .should_retry = false})

// Table "Stripe / HTTP signal / Same key? / Agent action"
CLASSIFIER_ROW("stripe: Stripe-Should-Retry true on 409 retries the same identity",
               {.status = 409, .headers = {{"Stripe-Should-Retry", "true"}}, .effect = Effect::money,
                .answer_class = AnswerClass::transient, .should_retry = true})
CLASSIFIER_ROW("stripe: Stripe-Should-Retry true keeps a 429 rate_limited",
               {.status = 429, .headers = {{"Stripe-Should-Retry", "true"}, {"Retry-After", "2"}},
                .effect = Effect::money, .answer_class = AnswerClass::rate_limited, .should_retry = true,
                .retry_after = 2s})
CLASSIFIER_ROW("stripe: Stripe-Should-Retry false on 500 stops (money_rejected on money)",
               {.status = 500, .headers = {{"Stripe-Should-Retry", "false"}}, .effect = Effect::money,
                .answer_class = AnswerClass::money_rejected, .should_retry = false})
CLASSIFIER_ROW("stripe: Stripe-Should-Retry false on 503 stops (conflict on a write)",
               {.status = 503, .headers = {{"Stripe-Should-Retry", "False"}}, .effect = Effect::write,
                .answer_class = AnswerClass::conflict, .should_retry = false})
CLASSIFIER_ROW("stripe: Stripe-Should-Retry false keeps a non-retryable 400 validation",
               {.status = 400, .headers = {{"Stripe-Should-Retry", "false"}}, .effect = Effect::money,
                .answer_class = AnswerClass::validation, .should_retry = false})
CLASSIFIER_ROW("stripe: Stripe-Should-Retry on a 200 is still ok",
               {.status = 200, .headers = {{"Stripe-Should-Retry", "false"}}, .effect = Effect::money,
                .answer_class = AnswerClass::ok, .should_retry = false})
CLASSIFIER_ROW("stripe: timeout / no body is unknown",
               {.outcome = TransportOutcome::sent_no_answer, .effect = Effect::money,
                .answer_class = AnswerClass::unknown, .should_retry = false})
CLASSIFIER_ROW("stripe: 500 with an honoured key is transient (same key)",
               {.status = 500, .effect = Effect::money, .answer_class = AnswerClass::transient, .should_retry = true})
CLASSIFIER_ROW("stripe: 502 with an honoured key is transient (same key)",
               {.status = 502, .effect = Effect::money, .answer_class = AnswerClass::transient, .should_retry = true})
CLASSIFIER_ROW("stripe: 504 with an honoured key is transient (same key)",
               {.status = 504, .effect = Effect::money, .answer_class = AnswerClass::transient, .should_retry = true})
CLASSIFIER_ROW("stripe: 500 on money without an honoured key is unknown",
               {.status = 500, .effect = Effect::money, .key_honoured = false,
                .answer_class = AnswerClass::unknown, .should_retry = false})
CLASSIFIER_ROW("stripe: 503 with Retry-After on money without an honoured key is unknown",
               {.status = 503, .headers = {{"Retry-After", "1"}}, .effect = Effect::money, .key_honoured = false,
                .answer_class = AnswerClass::unknown, .should_retry = false, .retry_after = 1s})
CLASSIFIER_ROW("retry-or-escalate: 503 on a plain write without an honoured key is unknown (two CRM rows)",
               {.status = 503, .effect = Effect::write, .key_honoured = false,
                .answer_class = AnswerClass::unknown, .should_retry = false})
CLASSIFIER_ROW("stripe: 500 on a read stays transient whatever the key",
               {.status = 500, .effect = Effect::read, .key_honoured = false,
                .answer_class = AnswerClass::transient, .should_retry = true})
CLASSIFIER_ROW("stripe: content 400 you will fix is validation",
               {.status = 400, .effect = Effect::money, .answer_class = AnswerClass::validation, .should_retry = false})
CLASSIFIER_ROW("stripe: 401 is auth, do not retry the charge",
               {.status = 401, .effect = Effect::money, .answer_class = AnswerClass::auth, .should_retry = false})
CLASSIFIER_ROW("stripe: 429 waits with the same key",
               {.status = 429, .effect = Effect::money, .answer_class = AnswerClass::rate_limited, .should_retry = true})

// SPEC section 3 rows not covered above.
CLASSIFIER_ROW("spec: 2xx is ok", {.status = 201, .answer_class = AnswerClass::ok, .should_retry = false})
CLASSIFIER_ROW("spec: 409 is conflict", {.status = 409, .answer_class = AnswerClass::conflict, .should_retry = false})
CLASSIFIER_ROW("spec: 402 is money_rejected",
               {.status = 402, .effect = Effect::money, .answer_class = AnswerClass::money_rejected, .should_retry = false})
CLASSIFIER_ROW("spec: a per-tool classify rule comes first",
               {.status = 404, .rules = {{.status = 404, .answer_class = AnswerClass::ok}},
                .answer_class = AnswerClass::ok, .should_retry = false})
CLASSIFIER_ROW("spec: a per-tool classify rule on a header value",
               {.status = 400, .headers = {{"X-Error", "Lock_Timeout"}},
                .rules = {{.header = "x-error", .header_value = "lock_timeout", .answer_class = AnswerClass::transient}},
                .answer_class = AnswerClass::transient, .should_retry = true})
CLASSIFIER_ROW("spec: a classify rule beats Stripe-Should-Retry",
               {.status = 402, .headers = {{"Stripe-Should-Retry", "true"}},
                .rules = {{.status = 402, .answer_class = AnswerClass::money_rejected}},
                .answer_class = AnswerClass::money_rejected, .should_retry = false})
CLASSIFIER_ROW("spec: Retry-After in the past is zero",
               {.status = 429, .headers = {{"Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"}},
                .answer_class = AnswerClass::rate_limited, .should_retry = true, .retry_after = 0s})
CLASSIFIER_ROW("spec: a malformed Retry-After is ignored (503 stays transient)",
               {.status = 503, .headers = {{"Retry-After", "soon"}}, .answer_class = AnswerClass::transient,
                .should_retry = true})

TEST_CASE("Retry-After in all three HTTP-date forms and seconds") {
  const auto later = [](std::string_view v) { return parse_retry_after(v, now); };
  CHECK(later("Mon, 30 Nov 2026 12:01:00 GMT") == Duration(60s));
  CHECK(later("Monday, 30-Nov-26 12:01:00 GMT") == Duration(60s));
  CHECK(later("Mon Nov 30 12:01:00 2026") == Duration(60s));
  CHECK(later("0") == Duration(0s));
  CHECK(later("86400") == Duration(24h));
  CHECK_FALSE(later("-5"));
  CHECK_FALSE(later("5s"));
  CHECK_FALSE(later("Mon, 31 Nov 2026 12:01:00 GMT"));
  CHECK_FALSE(later("Mon, 30 Nov 2026 25:01:00 GMT"));
  CHECK_FALSE(later(""));
}
