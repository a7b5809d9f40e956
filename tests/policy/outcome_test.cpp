// settle_attempt(), table-driven: what each answer of an attempt does to its
// intent, including the rules for re-sends (the ambiguous-refusal rule).
#include "policy/outcome.hpp"

#include <doctest/doctest.h>

using namespace idemgate::policy;

namespace {

struct Row {
  const char* name;
  AnswerClass raw;
  AttemptFacts facts;
  AnswerClass recorded;
  SettledState state;
  bool waive = false;
};

const Row rows[] = {
    {"first try ok: completed", AnswerClass::ok, {1, false, true}, AnswerClass::ok, SettledState::completed},
    {"first try 429: retryable", AnswerClass::rate_limited, {1, false, true}, AnswerClass::rate_limited,
     SettledState::retryable},
    {"first try timed out: unknown", AnswerClass::unknown, {1, false, false}, AnswerClass::unknown,
     SettledState::unknown},
    {"first try 409: denied (the provider refused this call)", AnswerClass::conflict, {1, false, true},
     AnswerClass::conflict, SettledState::denied},
    {"first try 400: denied", AnswerClass::validation, {1, false, true}, AnswerClass::validation, SettledState::denied},
    {"first try connect failed: retryable (nothing sent)", AnswerClass::transient, {1, false, false},
     AnswerClass::transient, SettledState::retryable},
    {"retry of a retryable answered 409: unknown (key in use / another body)", AnswerClass::conflict,
     {2, false, true}, AnswerClass::unknown, SettledState::unknown},
    {"retry of a retryable answered 422: unknown", AnswerClass::validation, {2, false, true}, AnswerClass::unknown,
     SettledState::unknown},
    {"retry answered 402: denied", AnswerClass::money_rejected, {2, false, true}, AnswerClass::money_rejected,
     SettledState::denied},
    {"reconciling re-send ok: completed", AnswerClass::ok, {2, true, true}, AnswerClass::ok, SettledState::completed},
    {"reconciling re-send 409 in use: unknown, waived", AnswerClass::conflict, {2, true, true}, AnswerClass::unknown,
     SettledState::unknown, true},
    {"reconciling re-send 403: unknown, counted", AnswerClass::forbidden, {2, true, true}, AnswerClass::unknown,
     SettledState::unknown, false},
    {"reconciling re-send 503: unknown, waived (not now)", AnswerClass::transient, {2, true, true},
     AnswerClass::unknown, SettledState::unknown, true},
    {"reconciling re-send could not connect: unknown, waived", AnswerClass::transient, {2, true, false},
     AnswerClass::unknown, SettledState::unknown, true},
    {"reconciling re-send timed out: unknown, counted", AnswerClass::unknown, {2, true, false}, AnswerClass::unknown,
     SettledState::unknown, false},
};

}  // namespace

TEST_CASE("settle_attempt: every row") {
  for (const auto& row : rows) {
    SUBCASE(row.name) {
      auto s = settle_attempt(row.raw, row.facts);
      CHECK(to_string(s.answer_class) == to_string(row.recorded));
      CHECK(to_string(s.state) == to_string(row.state));
      CHECK(s.waive == row.waive);
    }
  }
}
