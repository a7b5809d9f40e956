// Hostile input never crashes or throws: random bytes through every function
// that reads request or answer data (seeded, so a failure reproduces).
#include "policy/classify.hpp"
#include "policy/fingerprint.hpp"
#include "policy/match.hpp"
#include "policy/reconcile.hpp"

#include <doctest/doctest.h>

#include <random>

using namespace idemgate::policy;

namespace {

// Random bytes biased towards the characters parsers care about.
std::string random_text(std::mt19937& random, std::size_t max_size) {
  static constexpr std::string_view interesting = "{}[]\":,=&%+/~\\0123456789abcXYZ .-\x00\xff\n";
  std::string out(random() % (max_size + 1), '\0');
  for (auto& c : out)
    c = random() % 4 == 0 ? static_cast<char>(random() % 256) : interesting[random() % interesting.size()];
  return out;
}

}  // namespace

TEST_CASE("random bytes through fingerprint, matcher, classifier and answer readers") {
  std::mt19937 random(99);
  Tool tool;
  tool.name = "t";
  tool.effect = Effect::money;
  tool.receipt = "/id";
  tool.fingerprint.ignore = {"/a/0", "/metadata/x"};
  tool.require = {"/a", "/b/c"};
  tool.match = {"api.example.com", 0, "POST", "/v1/{id}", "", {"x=1"}};
  auto compiled = ToolTable::compile({tool});
  const auto now = std::chrono::system_clock::time_point{} + std::chrono::hours(500000);
  for (int i = 0; i < 3000; ++i) {
    const auto body = random_text(random, 64);
    const auto text = random_text(random, 24);
    for (std::string_view type : {"application/json", "application/x-www-form-urlencoded", "text/plain"}) {
      const std::vector<Header> headers{{text, body}, {"Retry-After", text}};
      const auto result = fingerprint({.method = text, .scheme = "https", .host = text, .port = 443,
                                       .target = body, .content_type = type, .body = body, .headers = headers},
                                      tool);
      CHECK(result.hex.size() == 64);
      (void)missing_required(tool, result.body ? &*result.body : nullptr);
      (void)classify({TransportOutcome::answered, static_cast<int>(random() % 700), headers}, tool, now);
    }
    (void)compiled.table->match({.method = "POST", .host = text, .port = 443, .path = body, .query = text, .mcp_tool = text});
    (void)mcp_tool_name(body);
    (void)parse_retry_after(text, now);
    (void)query_found(tool.reconcile.query, body);
    (void)receipt_of(tool, body);
    (void)expand_url_template(body, {.key = text, .receipt = text, .body = nullptr});
  }
}
