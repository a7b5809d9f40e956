// Sans-I/O pieces of the admin listener: token checks, loopback Host names,
// HTML escaping and the notifier's body.
#include "proxy/admin_auth.hpp"
#include "proxy/admin_page.hpp"
#include "proxy/notifier.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>

using namespace idemgate;
using namespace idemgate::proxy;

TEST_CASE("constant_time_equal compares contents of any length") {
  CHECK(constant_time_equal("secret-token", "secret-token"));
  CHECK_FALSE(constant_time_equal("secret-token", "secret-tokeN"));
  CHECK_FALSE(constant_time_equal("secret-token", "secret-token-longer"));
  CHECK_FALSE(constant_time_equal("", "x"));
  // RFC 4231 test case 2.
  CHECK(hmac_sha256_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("AdminAuth: bearer, cookie and the start-up refusals") {
  std::string const path = "/tmp/idemgate-admin-unit.token";
  { std::ofstream(path) << "tok-123\n"; }
  config::Admin admin;
  admin.listen = {"0.0.0.0", 0};
  admin.token_file = path;
  std::string error;
  auto auth = AdminAuth::load(admin, error);
  REQUIRE(error.empty());
  CHECK(auth.bearer_ok("Bearer tok-123"));
  CHECK(auth.bearer_ok("bearer tok-123"));
  CHECK_FALSE(auth.bearer_ok("Bearer tok-1234"));
  CHECK_FALSE(auth.bearer_ok("Basic tok-123"));
  CHECK_FALSE(auth.bearer_ok(""));
  auto const cookie = auth.session_cookie();
  CHECK(cookie.find("tok-123") == std::string::npos);
  CHECK(cookie.find("HttpOnly") != std::string::npos);
  auto const value = cookie.substr(0, cookie.find(';'));
  CHECK(auth.cookie_ok("a=b; " + value + "; c=d"));
  CHECK_FALSE(auth.cookie_ok("idemgate_admin=0000"));
  CHECK(auth.csrf_ok(auth.csrf_token()));
  CHECK_FALSE(auth.csrf_ok(""));

  admin.token_file.clear();
  AdminAuth::load(admin, error);
  CHECK(error.find("not a loopback address") != std::string::npos);
  error.clear();
  admin.listen = {"127.0.0.1", 0};
  auto open = AdminAuth::load(admin, error);
  CHECK(error.empty());
  CHECK_FALSE(open.has_token());
  CHECK_FALSE(open.bearer_ok("Bearer "));
  { std::ofstream(path) << "\n"; }
  admin.token_file = path;
  AdminAuth::load(admin, error);
  CHECK(error.find("is empty") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("loopback Host names") {
  CHECK(loopback_host("127.0.0.1:8081"));
  CHECK(loopback_host("localhost:8081"));
  CHECK(loopback_host("[::1]:8081"));
  CHECK(loopback_host("127.0.0.1"));
  CHECK_FALSE(loopback_host("evil.example:8081"));
  CHECK_FALSE(loopback_host("10.0.0.1:8081"));
  CHECK_FALSE(loopback_host(""));
}

TEST_CASE("page escaping") {
  CHECK(page::escape_html("<a href=\"x\">'&'</a>") == "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  CHECK(page::escape_url("run 1/é") == "run%201%2F%C3%A9");
}

TEST_CASE("the webhook body carries the package and nothing else") {
  ledger::EscalationRequest r{"run-1", 7, "money_unknown", R"({"reason_code":"money_unknown","tool":"pay"})"};
  auto const body = Notifier::body_for(42, r);
  CHECK(body == R"({"event":"escalation","escalation_id":42,"run":"run-1","reason_code":"money_unknown",)"
                R"("package":{"reason_code":"money_unknown","tool":"pay"},"intent_id":7})");
}
