// CONNECT planning: a host with tools is intercepted or refused, never
// tunnelled blind.
#include "proxy/connect_plan.hpp"

#include <doctest/doctest.h>

using namespace idemgate;
using namespace idemgate::proxy;

namespace {

std::shared_ptr<const config::Config> load(const std::string& extra) {
  std::string const yaml = extra +
                           "tools:\n"
                           "  - name: pay.charge\n"
                           "    match: { host: api.pay.test, method: POST, path: /v1/charges }\n"
                           "    effect: money\n"
                           "  - name: local.ticket\n"
                           "    match: { host: 127.0.0.1, port: 9000, method: POST, path: /t }\n"
                           "    effect: write\n";
  auto r = config::load_string(yaml, "t.yaml");
  REQUIRE(r.errors.empty());
  return r.config;
}

Target at(std::string host, std::uint16_t port) {
  Target t;
  t.scheme = "https";
  t.host = std::move(host);
  t.port = port;
  t.origin_form = "/";
  return t;
}

}  // namespace

TEST_CASE("connect plan: a tool host with interception off is 403 intercept_required naming the key") {
  auto cfg = load("");
  auto const plan = plan_connect(*cfg, at("api.pay.test", 443), false);
  REQUIRE(plan.action == ConnectAction::refuse);
  CHECK(plan.problem->status == 403);
  CHECK(plan.problem->reason_code == "intercept_required");
  CHECK(plan.problem->detail.find("tls.intercept") != std::string::npos);
  CHECK(plan.problem->detail.find("pay.charge") != std::string::npos);
  CHECK(plan.problem->extra.at("config_key") == "tls.intercept");
  CHECK(plan.problem->extra.at("terminal") == "abort");
}

TEST_CASE("connect plan: intercept when possible, the port of a tool counts") {
  auto cfg = load("");
  CHECK(plan_connect(*cfg, at("api.pay.test", 443), true).action == ConnectAction::intercept);
  CHECK(plan_connect(*cfg, at("127.0.0.1", 9000), true).action == ConnectAction::intercept);
  CHECK(plan_connect(*cfg, at("127.0.0.1", 9000), false).action == ConnectAction::refuse);
  // Another port of the same address has no tool: a blind tunnel.
  CHECK(plan_connect(*cfg, at("127.0.0.1", 9001), false).action == ConnectAction::tunnel);
  CHECK(plan_connect(*cfg, at("other.test", 443), true).action == ConnectAction::tunnel);
}

TEST_CASE("connect plan: intercept_hosts only with interception, unmatched deny refuses the rest") {
  auto cfg = load("tls: { intercept_hosts: [\"*.seen.test\"] }\n");
  CHECK(plan_connect(*cfg, at("a.seen.test", 443), true).action == ConnectAction::intercept);
  CHECK(plan_connect(*cfg, at("a.seen.test", 443), false).action == ConnectAction::tunnel);
  auto deny = load("unmatched: deny\n");
  auto const plan = plan_connect(*deny, at("other.test", 443), true);
  REQUIRE(plan.action == ConnectAction::refuse);
  CHECK(plan.problem->reason_code == "policy_deny");
}

TEST_CASE("connect plan: the first byte tells a TLS hello from plain HTTP") {
  CHECK(starts_tls_handshake(0x16));
  CHECK_FALSE(starts_tls_handshake('P'));
  CHECK_FALSE(starts_tls_handshake('G'));
}
