// config/reference.yaml documents every key: it loads, it names every key the
// schema accepts, and its values are the defaults of config.hpp.
#include "config/config.hpp"
#include "config/keys.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

using namespace idemgate;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const std::string reference_path = IDEMGATE_SOURCE_DIR "/config/reference.yaml";

}  // namespace

TEST_CASE("reference.yaml loads") {
  const auto result = config::load_file(reference_path);
  std::string errors;
  for (const auto& e : result.errors) errors += config::format(e) + "\n";
  REQUIRE_MESSAGE(result.errors.empty(), errors);
  CHECK(result.config->tools.size() == 2);
}

TEST_CASE("reference.yaml names every key the loader accepts") {
  const auto written = config::written_key_paths(read_text(reference_path));
  REQUIRE_FALSE(written.empty());
  for (const auto& key : config::known_key_paths())
    CHECK_MESSAGE(std::find(written.begin(), written.end(), key) != written.end(), "not in reference.yaml: " << key);
}

TEST_CASE("reference.yaml values are the defaults") {
  const auto result = config::load_file(reference_path);
  REQUIRE(result.config);
  const config::Config defaults;
  const auto& c = *result.config;
  CHECK(c.listen.host == defaults.listen.host);
  CHECK(c.listen.port == defaults.listen.port);
  CHECK(c.admin.listen.port == defaults.admin.listen.port);
  CHECK(c.ledger.url == defaults.ledger.url);
  CHECK(c.ledger.pool_size == defaults.ledger.pool_size);
  CHECK(c.ledger.queue_limit == defaults.ledger.queue_limit);
  CHECK(c.ledger.statement_timeout == defaults.ledger.statement_timeout);
  CHECK(c.ledger.response_cap == defaults.ledger.response_cap);
  CHECK(c.tls.intercept == defaults.tls.intercept);
  CHECK(c.tls.ca_cert == defaults.tls.ca_cert);
  CHECK(c.tls.leaf_cache == defaults.tls.leaf_cache);
  CHECK(c.runs.header == defaults.runs.header);
  CHECK(c.runs.budget == defaults.runs.budget);
  CHECK(c.unmatched == defaults.unmatched);
  CHECK(c.egress.allow_hosts == defaults.egress.allow_hosts);
  CHECK(c.timeouts.client_header == defaults.timeouts.client_header);
  CHECK(c.timeouts.upstream_connect == defaults.timeouts.upstream_connect);
  CHECK(c.timeouts.upstream_response == defaults.timeouts.upstream_response);
  CHECK(c.timeouts.idle == defaults.timeouts.idle);
  CHECK(c.timeouts.drain == defaults.timeouts.drain);
  CHECK(c.limits.header_bytes == defaults.limits.header_bytes);
  CHECK(c.limits.request_line == defaults.limits.request_line);
  CHECK(c.limits.inspect_body == defaults.limits.inspect_body);
  CHECK(c.limits.request_body == defaults.limits.request_body);
  CHECK(c.limits.upstream_pool == defaults.limits.upstream_pool);
  CHECK(c.limits.max_connections == defaults.limits.max_connections);
  CHECK(c.threads == defaults.threads);

  const policy::Tool tool_defaults;
  const auto& t = c.tools[0];
  CHECK(t.match.port == tool_defaults.match.port);
  CHECK(t.idempotency.header == tool_defaults.idempotency.header);
  CHECK(t.idempotency.mode == tool_defaults.idempotency.mode);
  CHECK(t.idempotency.binding == tool_defaults.idempotency.binding);
  CHECK(t.idempotency.honoured == tool_defaults.idempotency.honoured);
  CHECK(t.fingerprint.scope == tool_defaults.fingerprint.scope);
  CHECK(t.fingerprint.window == tool_defaults.fingerprint.window);
  CHECK(t.retry.bound == tool_defaults.retry.bound);
  CHECK(t.retry.retry_after == tool_defaults.retry.retry_after);
  CHECK(t.retry.max_retry_after == tool_defaults.retry.max_retry_after);
  CHECK(t.reconcile.mode == tool_defaults.reconcile.mode);
  CHECK(t.reconcile.ttl == tool_defaults.reconcile.ttl);
  CHECK(t.policy == tool_defaults.policy);
  CHECK(t.should_retry_header == tool_defaults.should_retry_header);
  const auto& q = c.tools[1].reconcile;
  CHECK(q.settle == tool_defaults.reconcile.settle);
  CHECK(q.query.method == tool_defaults.reconcile.query.method);
}
