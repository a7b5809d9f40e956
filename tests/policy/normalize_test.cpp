// The normal form of a request target: each rule, the ambiguous spellings,
// and the promise that matching and the fingerprint read one form.
#include "policy/fingerprint.hpp"
#include "policy/match.hpp"
#include "policy/normalize.hpp"

#include <doctest/doctest.h>

using namespace idemgate::policy;

TEST_CASE("paths: unreserved escapes decoded, others upper-cased, dot and empty segments resolved") {
  struct Row {
    const char* raw;
    const char* normal;
  };
  const Row rows[] = {
      {"/v1/charges", "/v1/charges"},
      {"/v1/%63harges", "/v1/charges"},
      {"/v1/%63%68arges", "/v1/charges"},
      {"/%7Euser/%7e", "/~user/~"},
      {"/a%2db_c%2E", "/a-b_c."},
      {"/v1//charges", "/v1/charges"},
      {"//v1///charges//", "/v1/charges"},
      {"/v1/charges/", "/v1/charges"},
      {"/v1/./charges", "/v1/charges"},
      {"/v1/x/../charges", "/v1/charges"},
      {"/../../v1/charges", "/v1/charges"},
      {"/v1/%2E%2E/v1/charges", "/v1/charges"},
      {"/v1/%2e/charges", "/v1/charges"},
      {"/v1/..", "/"},
      {"", "/"},
      {"/", "/"},
      {"/a%20b", "/a%20b"},
      {"/a%c3%a9", "/a%C3%A9"},
      {"/a\xc3\xa9", "/a%C3%A9"},
      {"/a{b}", "/a%7Bb%7D"},
      {"/100%", "/100%25"},
      {"/a%zz", "/a%25zz"},
      {"/a:b@c!$&'()*+,=", "/a:b@c!$&'()*+,="},
      {"/x%3By", "/x%3By"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.raw);
    const auto p = normalize_path(row.raw);
    CHECK(p.path == row.normal);
    CHECK(p.alternates.empty());
    CHECK(normalize_path(p.path).path == p.path);  // idempotent
  }
}

TEST_CASE("paths with no single reading keep the escaped one and carry the others") {
  auto p = normalize_path("/v1%2Fcharges");
  CHECK(p.path == "/v1%2Fcharges");
  REQUIRE(p.alternates.size() == 1);
  CHECK(p.alternates[0] == "/v1/charges");

  p = normalize_path("/v1%2fcharges");
  CHECK(p.path == "/v1%2Fcharges");
  CHECK(p.alternates == std::vector<std::string>{"/v1/charges"});

  p = normalize_path("/v1%5Ccharges");
  CHECK(p.alternates == std::vector<std::string>{"/v1/charges"});
  p = normalize_path("/v1\\charges");
  CHECK(p.path == "/v1%5Ccharges");
  CHECK(p.alternates == std::vector<std::string>{"/v1/charges"});

  p = normalize_path("/v1/charges;jsessionid=1");
  CHECK(p.path == "/v1/charges;jsessionid=1");
  CHECK(p.alternates == std::vector<std::string>{"/v1/charges"});

  // Both at once: each reading on its own and the two together.
  p = normalize_path("/v1/x%2F..%2Fcharges;a");
  CHECK(p.path == "/v1/x%2F..%2Fcharges;a");
  CHECK(p.alternates == std::vector<std::string>{"/v1/charges;a", "/v1/x%2F..%2Fcharges", "/v1/charges"});
}

TEST_CASE("hosts: lowercase, one trailing dot dropped, unreserved escapes decoded") {
  CHECK(normalize_host("API.Stripe.COM") == "api.stripe.com");
  CHECK(normalize_host("api.stripe.com.") == "api.stripe.com");
  CHECK(normalize_host("api.%73tripe.com") == "api.stripe.com");
  CHECK(normalize_host("api.%53tripe.com") == "api.stripe.com");
  CHECK(normalize_host("127.0.0.1.") == "127.0.0.1");
  CHECK(normalize_host("::1") == "::1");
  CHECK_FALSE(normalize_host("api%2Fstripe.com"));
  CHECK_FALSE(normalize_host("api%00.com"));
  CHECK_FALSE(normalize_host("api%2"));
  CHECK_FALSE(normalize_host(""));
  CHECK_FALSE(normalize_host("."));
}

TEST_CASE("targets: default ports dropped, query escapes normalised in order") {
  auto t = normalize_target("HTTPS", "Api.Example.com.", 443, "/v1/%63harges?b=%7e&a=%2f");
  CHECK(t.scheme == "https");
  CHECK(t.host == "api.example.com");
  CHECK(t.port == 0);
  CHECK(t.path.path == "/v1/charges");
  CHECK(t.query == "b=~&a=%2F");
  CHECK(normalize_target("http", "h", 80, "/").port == 0);
  CHECK(normalize_target("http", "h", 443, "/").port == 443);
  CHECK(normalize_target("https", "h", 80, "/").port == 80);
  CHECK_FALSE(normalize_target("http", "h", 80, "/x").query);
  CHECK(normalize_target("http", "h", 80, "/x?").query == "");
}

TEST_CASE("path patterns are normalised the same way when tools are compiled") {
  CHECK(normalize_path_pattern("/v1//charges/") == "/v1/charges");
  CHECK(normalize_path_pattern("/v1/./x/{id}/") == "/v1/x/{id}");
  CHECK(normalize_path_pattern("/v1/*") == "/v1/*");
  CHECK(normalize_path_pattern("/v1//*") == "/v1/*");
  CHECK(normalize_path_pattern("/*") == "/*");
  CHECK(normalize_path_pattern("/v1*") == "/v1*");
  CHECK(normalize_path_pattern("") == "");
}

namespace {

Tool tool(std::string name, std::string method, std::string path, Effect effect) {
  Tool t;
  t.name = std::move(name);
  t.match.host = "api.example.com";
  t.match.method = std::move(method);
  t.match.path = std::move(path);
  t.effect = effect;
  return t;
}

std::shared_ptr<const ToolTable> table() {
  auto compiled = ToolTable::compile({
      tool("charge", "POST", "/v1/charges", Effect::money),
      tool("refund", "POST", "/v1/charges/{id}/refund", Effect::money),
      tool("files", "GET", "/v1/files/*", Effect::read),
      tool("trailing", "POST", "/v1/tickets/", Effect::write),
  });
  REQUIRE(compiled.ties.empty());
  return compiled.table;
}

struct Routed {
  std::string tool = "none";
  std::string refused_for;
};

Routed route(std::string_view method, std::string_view host, std::string_view origin) {
  static const auto t = table();
  const auto m = t->match_target({method, "https", host, 443, origin, ""});
  Routed r;
  if (m.tool) r.tool = m.tool->name;
  if (m.ambiguous_write) r.refused_for = m.ambiguous_write->name;
  return r;
}

}  // namespace

TEST_CASE("match_target: every spelling of a write matches it, or is refused, never unmatched") {
  struct Row {
    const char* method;
    const char* host;
    const char* origin;
    const char* tool;
    const char* refused_for;
  };
  const Row rows[] = {
      {"POST", "api.example.com", "/v1/charges", "charge", ""},
      {"POST", "api.example.com", "/v1/%63harges", "charge", ""},
      {"POST", "api.example.com", "/v1//charges", "charge", ""},
      {"POST", "api.example.com", "/v1/./charges", "charge", ""},
      {"POST", "api.example.com", "/v1/x/../charges", "charge", ""},
      {"POST", "api.example.com", "/v1/charges/", "charge", ""},
      {"POST", "API.EXAMPLE.COM", "/v1/charges", "charge", ""},
      {"POST", "api.example.com.", "/v1/charges?x=%41", "charge", ""},
      {"POST", "api.example.com..", "/v1/charges", "charge", ""},
      {"POST", "Api.Example.Com.", "/v1/charges", "charge", ""},
      {"POST", "api.%65xample.com", "/v1/charges", "charge", ""},
      {"POST", "api.example.com", "/v1/charges/ch_1/refund", "refund", ""},
      {"POST", "api.example.com", "/v1/charges/ch_1/%72efund", "refund", ""},
      {"POST", "api.example.com", "/v1/tickets", "trailing", ""},
      // No single reading, and one reading is a write: refused.
      {"POST", "api.example.com", "/v1%2Fcharges", "none", "charge"},
      {"POST", "api.example.com", "/v1%2fcharges", "none", "charge"},
      {"POST", "api.example.com", "/v1\\charges", "none", "charge"},
      {"POST", "api.example.com", "/v1/charges;x=1", "none", "charge"},
      {"POST", "api.example.com", "/v1/charges/ch_1%2Frefund", "none", "refund"},
      // ... but a {param} segment holding %2F is that write in its escaped
      // reading already, and its other reading is the same tool or none.
      {"POST", "api.example.com", "/v1/charges/a%2Fb/refund", "refund", ""},
      // Ambiguous reads, or ambiguous paths whose readings are no write, pass.
      {"GET", "api.example.com", "/v1/files/a%2Fb", "files", ""},
      {"GET", "api.example.com", "/v1%2Fcharges", "none", ""},
      {"POST", "api.example.com", "/v2%2Fcharges", "none", ""},
      {"POST", "other.example.com", "/v1%2Fcharges", "none", ""},
  };
  for (const auto& row : rows) {
    CAPTURE(row.method);
    CAPTURE(row.host);
    CAPTURE(row.origin);
    const auto r = route(row.method, row.host, row.origin);
    CHECK(r.tool == row.tool);
    CHECK(r.refused_for == row.refused_for);
  }
}

TEST_CASE("match_target: glob and any-host tools are found for every spelling of the host") {
  auto globbed = tool("glob", "POST", "/v1/charges", Effect::money);
  globbed.match.host = "*.example.com";
  auto anywhere = tool("anywhere", "POST", "/v1/anything", Effect::write);
  anywhere.match.host.clear();
  const auto compiled = ToolTable::compile({globbed, anywhere});
  REQUIRE(compiled.ties.empty());
  for (const std::string_view host : {"a.example.com", "A.EXAMPLE.COM", "a.example.com.", "a.example.com..",
                                      "x.a.example.com", "a.%65xample.com"}) {
    CAPTURE(host);
    const auto m = compiled.table->match_target({"POST", "https", host, 443, "/v1/charges", ""});
    REQUIRE(m.tool);
    CHECK(m.tool->name == "glob");
    CHECK_FALSE(compiled.table->match_target({"POST", "https", host, 443, "/v1/other", ""}).tool);
  }
  CHECK_FALSE(compiled.table->match_target({"POST", "https", "example.org", 443, "/v1/charges", ""}).tool);
  for (const std::string_view host : {"example.org", "::1", "10.0.0.1", "a.example.com.."}) {
    CAPTURE(host);
    const auto m = compiled.table->match_target({"POST", "https", host, 443, "/v1/anything", ""});
    REQUIRE(m.tool);
    CHECK(m.tool->name == "anywhere");
  }
}

TEST_CASE("the fingerprint reads the same normal form: every spelling is one intent") {
  const auto t = table();
  const Tool& charge = t->tools()[0];
  auto fp = [&](std::string_view host, std::uint16_t port, std::string_view target) {
    FingerprintInput in;
    in.method = "POST";
    in.scheme = "https";
    in.host = host;
    in.port = port;
    in.target = target;
    in.content_type = "application/json";
    in.body = R"({"amount":1})";
    return fingerprint(in, charge).hex;
  };
  const auto base = fp("api.example.com", 443, "/v1/charges");
  REQUIRE(base.size() == 64);
  for (const char* spelling : {"/v1/%63harges", "/v1//charges", "/v1/./charges", "/v1/x/../charges", "/v1/charges/"})
    CHECK_MESSAGE(fp("api.example.com", 443, spelling) == base, spelling);
  CHECK(fp("API.Example.com.", 443, "/v1/charges") == base);
  CHECK(fp("api.example.com", 0, "/v1/charges") == base);
  CHECK(fp("api.example.com", 443, "/v1/charges?a=1&b=2") == fp("api.example.com", 443, "/v1/charges?b=2&%61=1"));
  CHECK(fp("api.example.com", 8443, "/v1/charges") != base);
  CHECK(fp("api.example.com", 443, "/v1%2Fcharges") != base);  // refused before it is ever fingerprinted
  CHECK(fp("api.example.com", 443, "/v1/Charges") != base);     // paths are case-sensitive
}
