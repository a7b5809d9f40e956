// Enum spellings round-trip through the single table in enum_names.hpp.
#include "policy/enum_names.hpp"
#include "policy/tool.hpp"

#include <doctest/doctest.h>

using namespace idemgate::policy;

TEST_CASE("every answer class round-trips through its name") {
  for (std::size_t i = 0; i < EnumNames<AnswerClass>::names.size(); ++i) {
    const auto value = static_cast<AnswerClass>(i);
    CHECK(parse_answer_class(to_string(value)) == value);
  }
  CHECK(to_string(AnswerClass::rate_limited) == "rate_limited");
  CHECK_FALSE(parse_answer_class("Rate_Limited"));
  CHECK(to_string(Effect::money) == "money");
  CHECK(to_string(KeyMode::passthrough) == "passthrough");
  CHECK(to_string(ReconcileMode::same_key) == "same_key");
  CHECK(to_string(PolicyAction::pending_approval) == "pending_approval");
}
