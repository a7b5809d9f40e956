// The schema of the config file, one table per struct. A key is accepted if
// and only if it appears here; reference.yaml documents each of them.
#include "config/schema.hpp"

namespace idemgate::config::detail {
namespace {

using namespace policy;

const Fields<MatchSpec>& match_fields() {
  static const Fields<MatchSpec> fields{
      field("host", &MatchSpec::host),     field("port", &MatchSpec::port),
      field("method", &MatchSpec::method), field("path", &MatchSpec::path),
      field("mcp_tool", &MatchSpec::mcp_tool),
      field("query", &MatchSpec::query),
  };
  return fields;
}

const Fields<IdempotencySpec>& idempotency_fields() {
  static const Fields<IdempotencySpec> fields{
      field("header", &IdempotencySpec::header),
      field("mode", &IdempotencySpec::mode),
      field("binding", &IdempotencySpec::binding),
      field("honoured", &IdempotencySpec::honoured),
  };
  return fields;
}

const Fields<FingerprintSpec>& fingerprint_fields() {
  static const Fields<FingerprintSpec> fields{
      field("ignore", &FingerprintSpec::ignore),
      field("ignore_query", &FingerprintSpec::ignore_query),
      field("headers", &FingerprintSpec::headers),
      field("scope", &FingerprintSpec::scope),
      field("window", &FingerprintSpec::window),
  };
  return fields;
}

const Fields<RetrySpec>& retry_fields() {
  static const Fields<RetrySpec> fields{
      integer_field("bound", &RetrySpec::bound, 0, 100),
      field("retry_after", &RetrySpec::retry_after),
      field("max_retry_after", &RetrySpec::max_retry_after),
  };
  return fields;
}

const Fields<ClassifyRule>& classify_fields() {
  static const Fields<ClassifyRule> fields{
      field("status", &ClassifyRule::status),
      field("header", &ClassifyRule::header),
      field("header_value", &ClassifyRule::header_value),
      field("class", &ClassifyRule::answer_class),
  };
  return fields;
}

const Fields<ReconcileQuery>& reconcile_query_fields() {
  static const Fields<ReconcileQuery> fields{
      field("method", &ReconcileQuery::method),
      field("url", &ReconcileQuery::url),
      field("found", &ReconcileQuery::found),
  };
  return fields;
}

const Fields<ReconcileSpec>& reconcile_fields() {
  static const Fields<ReconcileSpec> fields{
      field("mode", &ReconcileSpec::mode),
      field("ttl", &ReconcileSpec::ttl),
      field("settle", &ReconcileSpec::settle),
      field("inline", &ReconcileSpec::inline_budget),
      nested_field("query", &ReconcileSpec::query, reconcile_query_fields()),
  };
  return fields;
}

const Fields<Tool>& tool_fields() {
  static const Fields<Tool> fields{
      field("name", &Tool::name),
      nested_field("match", &Tool::match, match_fields()),
      field("effect", &Tool::effect),
      nested_field("idempotency", &Tool::idempotency, idempotency_fields()),
      nested_field("fingerprint", &Tool::fingerprint, fingerprint_fields()),
      nested_field("retry", &Tool::retry, retry_fields()),
      list_field("classify", &Tool::classify, classify_fields()),
      nested_field("reconcile", &Tool::reconcile, reconcile_fields()),
      field("receipt", &Tool::receipt),
      field("require", &Tool::require),
      field("policy", &Tool::policy),
      field("should_retry_header", &Tool::should_retry_header),
  };
  return fields;
}

const Fields<Notify>& notify_fields() {
  static const Fields<Notify> fields{
      field("url", &Notify::url),
      field("secret", &Notify::secret),
  };
  return fields;
}

const Fields<Admin>& admin_fields() {
  static const Fields<Admin> fields{
      field("listen", &Admin::listen),
      field("token_file", &Admin::token_file),
      nested_field("notify", &Admin::notify, notify_fields()),
  };
  return fields;
}

const Fields<Auth>& auth_fields() {
  static const Fields<Auth> fields{
      field("mode", &Auth::mode),
      field("users_file", &Auth::users_file),
  };
  return fields;
}

const Fields<Ledger>& ledger_fields() {
  static const Fields<Ledger> fields{
      field("url", &Ledger::url),
      integer_field("pool_size", &Ledger::pool_size, 1, 256),
      integer_field("queue_limit", &Ledger::queue_limit, 1, 1'000'000),
      field("statement_timeout", &Ledger::statement_timeout),
      field("admit_spin", &Ledger::admit_spin),
      field("outcome_gather", &Ledger::outcome_gather),
      size_field("response_cap", &Ledger::response_cap),
      field("fingerprint_key_file", &Ledger::fingerprint_key_file),
  };
  return fields;
}

const Fields<Tls>& tls_fields() {
  static const Fields<Tls> fields{
      field("intercept", &Tls::intercept),
      field("ca_cert", &Tls::ca_cert),
      field("ca_key", &Tls::ca_key),
      field("upstream_ca_file", &Tls::upstream_ca_file),
      field("intercept_hosts", &Tls::intercept_hosts),
      integer_field("leaf_cache", &Tls::leaf_cache, 1, 10'000'000),
  };
  return fields;
}

const Fields<Runs>& runs_fields() {
  static const Fields<Runs> fields{
      field("header", &Runs::header),
      integer_field("budget", &Runs::budget, 1, 100'000'000),
  };
  return fields;
}

const Fields<Egress>& egress_fields() {
  static const Fields<Egress> fields{
      field("allow_hosts", &Egress::allow_hosts),
      field("allow_private", &Egress::allow_private),
      field("allow_loopback", &Egress::allow_loopback),
  };
  return fields;
}

const Fields<Timeouts>& timeouts_fields() {
  static const Fields<Timeouts> fields{
      field("client_header", &Timeouts::client_header),
      field("upstream_connect", &Timeouts::upstream_connect),
      field("upstream_response", &Timeouts::upstream_response),
      field("idle", &Timeouts::idle),
      field("drain", &Timeouts::drain),
      field("outcome_record", &Timeouts::outcome_record),
  };
  return fields;
}

const Fields<Limits>& limits_fields() {
  static const Fields<Limits> fields{
      size_field("header_bytes", &Limits::header_bytes),
      size_field("request_line", &Limits::request_line),
      size_field("inspect_body", &Limits::inspect_body),
      size_field("request_body", &Limits::request_body),
      integer_field("upstream_pool", &Limits::upstream_pool, 0, 1'000'000),
      integer_field("max_connections", &Limits::max_connections, 1, 10'000'000),
      size_field("guarded_answer", &Limits::guarded_answer),
      size_field("guarded_budget", &Limits::guarded_budget),
  };
  return fields;
}

const Fields<Redact>& redact_fields() {
  static const Fields<Redact> fields{
      field("headers", &Redact::headers),
      field("body", &Redact::body),
      field("query", &Redact::query),
  };
  return fields;
}

const Fields<Route>& route_fields() {
  static const Fields<Route> fields{
      field("prefix", &Route::prefix),
      field("upstream", &Route::upstream),
  };
  return fields;
}

}  // namespace

const Fields<Config>& config_fields() {
  static const Fields<Config> fields{
      field("listen", &Config::listen),
      nested_field("admin", &Config::admin, admin_fields()),
      nested_field("auth", &Config::auth, auth_fields()),
      nested_field("ledger", &Config::ledger, ledger_fields()),
      nested_field("tls", &Config::tls, tls_fields()),
      nested_field("runs", &Config::runs, runs_fields()),
      field("unmatched", &Config::unmatched),
      nested_field("egress", &Config::egress, egress_fields()),
      nested_field("timeouts", &Config::timeouts, timeouts_fields()),
      nested_field("limits", &Config::limits, limits_fields()),
      nested_field("redact", &Config::redact, redact_fields()),
      list_field("routes", &Config::routes, route_fields()),
      list_field("tools", &Config::tools, tool_fields()),
      integer_field("threads", &Config::threads, 0, 1024),
  };
  return fields;
}

}  // namespace idemgate::config::detail
