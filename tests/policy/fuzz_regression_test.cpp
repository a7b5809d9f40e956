// Inputs the fuzzers in fuzz/ found, each with the property it broke; the
// fix is in the library, the input stays here so it cannot come back.
#include "policy/fingerprint.hpp"
#include "policy/json_parse.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace idemgate::policy;

namespace {

std::string canonical_of(std::string_view text) {
  boost::system::error_code ec;
  const auto value = parse_json(text, ec);
  REQUIRE_FALSE(ec);
  return canonical_json(value);
}

std::string body_fingerprint(std::string_view body) {
  Tool tool;
  tool.name = "t";
  FingerprintInput input{.method = "POST", .host = "api.example.com", .target = "/", .content_type = "application/json",
                         .body = body};
  return fingerprint(input, tool).hex;
}

}  // namespace

// fuzz_fingerprint, seed json_numbers: Boost.JSON 1.81 read 1.5e-300 one ulp
// off, so canonical text re-read gave another number (1.4999999999999998e-300).
TEST_CASE("fuzz: canonical JSON numbers are a fixed point") {
  const std::string crash =
      "[1.0,1e2,-0.0,1.5e-300,18446744073709551615,-9223372036854775808,9.3e18,\"\\u00e9\",true,null]";
  const auto canonical = canonical_of(crash);
  CHECK(canonical_of(canonical) == canonical);
  for (const char* number : {"1.5e-300", "0.1", "2.2250738585072014e-308", "4.9406564584124654e-324",
                             "1.7976931348623157e308", "123456789.123456789", "5e-324", "0.30000000000000004"})
    CHECK(canonical_of(canonical_of(number)) == canonical_of(number));
}

TEST_CASE("fuzz: spellings of one decimal are one fingerprint") {
  CHECK(body_fingerprint(R"({"x":1.5e-300})") == body_fingerprint(R"({"x":15e-301})"));
  CHECK(body_fingerprint(R"({"x":1.5e-300})") == body_fingerprint(R"({"x":1.5000000000000001e-300})"));
  CHECK(body_fingerprint(R"({"x":0.1})") == body_fingerprint(R"({"x":1e-1})"));
  CHECK(body_fingerprint(R"({"x":0.1})") != body_fingerprint(R"({"x":0.2})"));
}

TEST_CASE("the exact JSON parser refuses what boost::json::parse refuses") {
  boost::system::error_code ec;
  for (const char* bad : {"", "{", "[1,]", "1 2", "/*c*/1", "01", "1.", "\"\\x\"", "nul"}) {
    CAPTURE(bad);
    (void)parse_json(bad, ec);
    CHECK(ec);
  }
  std::string deep(33, '[');
  (void)parse_json(deep + std::string(33, ']'), ec);
  CHECK(ec);  // depth 32, as boost::json::parse
  (void)parse_json(std::string(32, '[') + std::string(32, ']'), ec);
  CHECK_FALSE(ec);
  const auto value = parse_json(R"( {"a":[1,-2,18446744073709551615,2.5,"s",true,null],"a":0} )", ec);
  REQUIRE_FALSE(ec);
  CHECK(canonical_json(value) == R"({"a":0})");
}
