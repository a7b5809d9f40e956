// load_string / load_file: every key read into the structs, errors located.
#include "config/check.hpp"
#include "config/config.hpp"

#include <doctest/doctest.h>

#include <sstream>

using namespace idemgate;
using namespace std::chrono_literals;

namespace {

std::string joined_errors(const config::LoadResult& result) {
  std::string out;
  for (const auto& e : result.errors) out += config::format(e) + "\n";
  return out;
}

}  // namespace

TEST_CASE("example.yaml loads with every section read") {
  const auto result = config::load_file(IDEMGATE_SOURCE_DIR "/config/example.yaml");
  REQUIRE_MESSAGE(result.errors.empty(), joined_errors(result));
  const auto& c = *result.config;
  CHECK(c.listen.host == "127.0.0.1");
  CHECK(c.listen.port == 8080);
  CHECK(c.admin.listen.port == 8081);
  CHECK(c.ledger.url == "sqlite:./var/ledger.db");
  CHECK(c.limits.header_bytes == 64 * 1024);
  CHECK(c.limits.inspect_body == 1024 * 1024);
  CHECK(c.timeouts.upstream_response == 30s);
  CHECK(c.routes.size() == 1);
  REQUIRE(c.tools.size() == 3);
  const auto& charge = c.tools[0];
  CHECK(charge.name == "stripe.create_charge");
  CHECK(charge.effect == policy::Effect::money);
  CHECK(charge.match.method == "POST");
  CHECK(charge.fingerprint.window == 24h);
  CHECK(charge.classify.size() == 1);
  CHECK(charge.classify[0].answer_class == policy::AnswerClass::money_rejected);
  CHECK(charge.reconcile.ttl == 15min);
  CHECK(charge.require == std::vector<std::string>{"/amount", "/currency"});
  CHECK(charge.source_line > 0);
  CHECK(c.tools[1].policy == policy::PolicyAction::pending_approval);
}

TEST_CASE("an unknown key names the nearest valid one, with line and column") {
  const auto result = config::load_string(
      "tools:\n"
      "  - name: a\n"
      "    match: { host: a.example.com }\n"
      "    efect: write\n",
      "t.yaml");
  REQUIRE(result.errors.size() == 1);
  CHECK(config::format(result.errors[0]) == "t.yaml:4:5: unknown key 'efect'; did you mean 'effect'?");
  CHECK_FALSE(result.config);
}

TEST_CASE("every error is collected, not just the first") {
  const auto result = config::load_string(
      "listen: nowhere\n"
      "timeouts: { idle: 15 }\n"
      "limits: { header_bytes: 64kb }\n"
      "unmatched: maybe\n",
      "t.yaml");
  CHECK_MESSAGE(result.errors.size() == 4, joined_errors(result));
  CHECK(joined_errors(result).find("valid values: pass, deny") != std::string::npos);
}

TEST_CASE("a YAML syntax error is located") {
  const auto result = config::load_string("listen: [\n", "t.yaml");
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0].line >= 1);
}

TEST_CASE("an empty file is the defaults with no tools") {
  const auto result = config::load_string("", "t.yaml");
  REQUIRE(result.config);
  CHECK(result.config->tools.empty());
  CHECK(result.config->listen.port == 8080);
}

TEST_CASE("check-config prints ok or every error") {
  std::ostringstream out, err;
  CHECK(config::check_config_main(IDEMGATE_SOURCE_DIR "/config/example.yaml", out, err) == 0);
  CHECK(out.str() == "ok: 3 tools\n");
  std::ostringstream out2, err2;
  CHECK(config::check_config_main("/nonexistent/idemgate.yaml", out2, err2) == 2);
  CHECK(err2.str().find("/nonexistent/idemgate.yaml: cannot read") == 0);
}

TEST_CASE("a loaded config carries its compiled tool table") {
  const auto result = config::load_file(IDEMGATE_SOURCE_DIR "/config/example.yaml");
  REQUIRE(result.config);
  REQUIRE(result.config->tool_table);
  policy::MatchRequest request;
  request.method = "POST";
  request.host = "api.stripe.com";
  request.port = 443;
  request.path = "/v1/charges";
  const auto* tool = result.config->tool_table->match(request);
  REQUIRE(tool);
  CHECK(tool->name == "stripe.create_charge");
  request.method = "GET";
  request.path = "/v1/customers/cus_123";
  REQUIRE(result.config->tool_table->match(request));
  CHECK(result.config->tool_table->match(request)->name == "stripe.get_customer");
}

TEST_CASE("the admin listener runs only where admin.listen is written, admin.notify is checked") {
  auto none = config::load_string("listen: 127.0.0.1:0\n", "a.yaml");
  REQUIRE_MESSAGE(none.errors.empty(), joined_errors(none));
  CHECK_FALSE(none.config->admin.enabled);

  auto on = config::load_string("admin: { listen: 127.0.0.1:0, token_file: t }\n", "b.yaml");
  REQUIRE_MESSAGE(on.errors.empty(), joined_errors(on));
  CHECK(on.config->admin.enabled);
  CHECK(on.config->admin.listen.port == 0);

  auto notify = config::load_string(
      "admin:\n  notify: { url: \"https://hooks.example.com/x\", secret: \"0123456789abcdef\" }\n", "c.yaml");
  REQUIRE_MESSAGE(notify.errors.empty(), joined_errors(notify));
  CHECK_FALSE(notify.config->admin.enabled);
  CHECK(notify.config->admin.notify.url == "https://hooks.example.com/x");

  auto bad = config::load_string("admin:\n  notify:\n    url: \"ftp://x\"\n    secret: short\n", "d.yaml");
  CHECK(joined_errors(bad) ==
        "d.yaml:3:5: 'ftp://x' is not an http:// or https:// URL\n"
        "d.yaml:4:5: admin.notify needs a secret of at least 16 characters to sign packages with\n");
  auto orphan = config::load_string("admin: { notify: { secret: \"0123456789abcdef0\" } }\n", "e.yaml");
  CHECK(joined_errors(orphan).find("admin.notify.secret is set but admin.notify.url is not") != std::string::npos);
}
