// Cross-field and meaning checks of a config that has been read: patterns
// are well formed, names are unique, and each tool's keys make sense for its
// effect. Every problem is reported at the line of the key that causes it.
#include "config/validate.hpp"

#include "policy/egress.hpp"
#include "policy/headers.hpp"
#include "policy/pattern.hpp"
#include "policy/reconcile.hpp"

#include <boost/url/parse.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>

namespace idemgate::config {
namespace {

using policy::Effect;
using policy::ReconcileMode;

// RFC 9110 token characters: what a header name may contain.
std::optional<std::string> header_name_error(std::string_view name) {
  static constexpr std::string_view extra = "!#$%&'*+-.^_`|~";
  const bool ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || extra.find(c) != std::string_view::npos;
  });
  if (ok) return std::nullopt;
  return "bad header name '" + std::string(name) + "'";
}

// An idempotency key header must reach the provider as the key: not a field
// this hop writes itself (Host, Via, Content-Length, Accept-Encoding), drops
// (hop-by-hop, Expect, Idemgate-*) or frames the message with.
std::optional<std::string> key_header_error(std::string_view name) {
  if (auto bad = header_name_error(name)) return bad;
  static constexpr std::string_view taken[] = {
      "host",       "via",        "content-length", "accept-encoding",     "transfer-encoding",
      "connection", "keep-alive", "te",             "trailer",             "upgrade",
      "expect",     "proxy-connection",             "proxy-authorization"};
  auto const same = [&](std::string_view t) { return policy::iequals(name, t); };
  bool const idemgate = name.size() >= 9 && policy::iequals(name.substr(0, 9), "idemgate-");
  if (std::any_of(std::begin(taken), std::end(taken), same) || idemgate)
    return "header '" + std::string(name) + "' cannot carry the key: idemgate writes or drops it on the way";
  return std::nullopt;
}

std::optional<std::string> query_name_error(std::string_view name) {
  if (name.empty()) return "empty query parameter name";
  if (name.find_first_of("&=#? ") != std::string_view::npos)
    return "bad query parameter name '" + std::string(name) + "' (write it decoded, without & = # ? or spaces)";
  return std::nullopt;
}

class Checker {
 public:
  Checker(const Config& config, const SourceMap& positions, std::vector<ConfigError>& errors)
      : config_(config), positions_(positions), errors_(errors) {}

  void run() {
    check_pattern_list("egress.allow_hosts", config_.egress.allow_hosts, policy::host_glob_error);
    check_pattern_list("tls.intercept_hosts", config_.tls.intercept_hosts, policy::host_glob_error);
    check_pattern_list("redact.body", config_.redact.body, policy::json_pointer_error);
    check_pattern_list("redact.headers", config_.redact.headers, header_name_error);
    check_pattern_list("redact.query", config_.redact.query, query_name_error);
    check_pattern("runs.header", config_.runs.header, header_name_error);
    check_ledger();
    check_tls();
    check_admin();
    check_limits();
    std::map<std::string, std::size_t> route_by_prefix;
    for (std::size_t i = 0; i < config_.routes.size(); ++i) {
      check_route(i);
      if (!route_by_prefix.emplace(config_.routes[i].prefix, i).second)
        report("routes[" + std::to_string(i) + "].prefix", "duplicate route prefix '" + config_.routes[i].prefix + "'");
    }
    std::map<std::string, std::size_t> first_by_name;
    for (std::size_t i = 0; i < config_.tools.size(); ++i) {
      const auto& tool = config_.tools[i];
      const auto path = "tools[" + std::to_string(i) + "]";
      if (const auto [it, fresh] = first_by_name.emplace(tool.name, i); !fresh && !tool.name.empty())
        report(path + ".name", "duplicate tool name '" + tool.name + "' (first declared at line " +
                                   std::to_string(config_.tools[it->second].source_line) + ")");
      check_tool(path, tool);
    }
  }

 private:
  void report(const std::string& path, std::string message) {
    const auto where = positions_.find(path);
    errors_.push_back({config_.source_path, where.line, where.column, std::move(message)});
  }

  template <class Check>
  void check_pattern(const std::string& path, std::string_view value, Check check) {
    if (auto problem = check(value)) report(path, *problem);
  }

  template <class Check>
  void check_pattern_list(const std::string& path, const std::vector<std::string>& values, Check check) {
    for (const auto& value : values) check_pattern(path, value, check);
  }

  void check_limits() {
    const auto& limits = config_.limits;
    // The HTTP parsers hold their header limit in 32 bits.
    if (limits.header_bytes > std::numeric_limits<std::uint32_t>::max())
      report("limits.header_bytes", "must be less than 4GiB");
    if (limits.guarded_answer < 1024) report("limits.guarded_answer", "must be at least 1KiB");
    // Room for one call's largest body and whole answer buffer, so that a
    // call alone never has its answer cut short or its body refused.
    if (limits.guarded_budget < limits.inspect_body + limits.guarded_answer)
      report("limits.guarded_budget", "must be at least limits.inspect_body + limits.guarded_answer (" +
                                          std::to_string(limits.inspect_body + limits.guarded_answer) + " bytes)");
  }

  void check_ledger() {
    const auto& url = config_.ledger.url;
    if (!url.starts_with("sqlite:") && !url.starts_with("postgresql://") && !url.starts_with("postgres://"))
      report("ledger.url", "ledger.url must start with sqlite: or postgresql://, got '" + url + "'");
    else if (url == "sqlite:")
      report("ledger.url", "ledger.url needs a file path after sqlite:");
    // A poll on the network thread: past a few milliseconds it would hold
    // up every other connection of that thread.
    if (config_.ledger.admit_spin > std::chrono::milliseconds(10))
      report("ledger.admit_spin", "must be at most 10ms");
    // The time an answered outcome may stay in memory only: a crash loses
    // it to its lease (then unknown, then reconciliation), and an
    // in-process retry of a retryable answer waits that long.
    if (config_.ledger.outcome_gather > std::chrono::milliseconds(100))
      report("ledger.outcome_gather", "must be at most 100ms");
  }

  void check_tls() {
    if (!config_.tls.intercept) return;
    if (config_.tls.ca_cert.empty()) report("tls.ca_cert", "tls.intercept needs tls.ca_cert");
    if (config_.tls.ca_key.empty()) report("tls.ca_key", "tls.intercept needs tls.ca_key");
  }

  void check_admin() {
    const auto& notify = config_.admin.notify;
    if (notify.url.empty() && notify.secret.empty()) return;
    if (notify.url.empty()) {
      report("admin.notify.secret", "admin.notify.secret is set but admin.notify.url is not");
      return;
    }
    check_http_url("admin.notify.url", notify.url);
    if (notify.secret.size() < 16)
      report(notify.secret.empty() ? "admin.notify" : "admin.notify.secret",
             "admin.notify needs a secret of at least 16 characters to sign packages with");
  }

  void check_route(std::size_t index) {
    const auto path = "routes[" + std::to_string(index) + "]";
    const auto& route = config_.routes[index];
    if (route.prefix.size() < 2 || route.prefix.front() != '/' || route.prefix.back() != '/')
      report(path + ".prefix", "route prefix must start and end with '/', as in /stripe/, got '" +
                                   route.prefix + "'");
    check_http_url(path + ".upstream", route.upstream);
  }

  void check_http_url(const std::string& path, const std::string& text) {
    const auto url = boost::urls::parse_absolute_uri(text);
    if (!url || (url->scheme() != "http" && url->scheme() != "https") || url->host().empty())
      report(path, "'" + text + "' is not an http:// or https:// URL");
  }

  // {key}, {receipt} and {/json/pointer} placeholders, then an http(s) URL.
  void check_url_template(const std::string& path, const std::string& text) {
    if (const auto problem = policy::url_template_error(text)) {
      report(path, *problem);
      return;
    }
    // Every placeholder as "x" (there is no body to read at load time).
    std::string filled;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '{') {
        filled += text[i];
        continue;
      }
      i = text.find('}', i);
      filled += "x";
    }
    check_http_url(path, filled);
  }

  void check_tool(const std::string& path, const policy::Tool& tool) {
    if (tool.name.empty()) report(path, "every tool needs a name");
    const auto& match = tool.match;
    if (match.host.empty()) report(path + ".match", "tool '" + tool.name + "' needs match.host");
    else check_pattern(path + ".match.host", match.host, policy::host_glob_error);
    if (!match.path.empty()) check_pattern(path + ".match.path", match.path, policy::path_pattern_error);
    for (const auto& condition : match.query)
      if (condition.empty() || condition.front() == '=' || condition.find('&') != std::string::npos)
        report(path + ".match.query", "bad query condition '" + condition + "': write name or name=value");
    if (!match.host.empty() && match.host.front() != '*' && !policy::check_host(config_.egress.allow_hosts, match.host).allowed)
      report(path + ".match.host", "tool '" + tool.name + "' host '" + match.host +
                                       "' is not in egress.allow_hosts, so the tool could never be called");
    if (!std::all_of(match.method.begin(), match.method.end(), [](unsigned char c) { return std::isupper(c); }))
      report(path + ".match.method", "bad method '" + match.method + "': write one method such as POST, or leave it out for any");

    check_pattern_list(path + ".fingerprint.ignore", tool.fingerprint.ignore, policy::json_pointer_error);
    check_pattern_list(path + ".fingerprint.headers", tool.fingerprint.headers, header_name_error);
    check_pattern(path + ".idempotency.header", tool.idempotency.header, key_header_error);
    if (!tool.should_retry_header.empty())
      check_pattern(path + ".should_retry_header", tool.should_retry_header, header_name_error);
    check_pattern_list(path + ".require", tool.require, policy::json_pointer_error);
    check_pattern(path + ".receipt", tool.receipt, policy::json_pointer_error);
    for (std::size_t i = 0; i < tool.classify.size(); ++i) check_classify_rule(path + ".classify[" + std::to_string(i) + "]", tool.classify[i]);
    check_reconcile(path, tool);
  }

  void check_classify_rule(const std::string& path, const policy::ClassifyRule& rule) {
    if (!rule.status && rule.header.empty()) report(path, "a classify rule needs a status or a header");
    if (rule.status && (*rule.status < 100 || *rule.status > 599))
      report(path + ".status", "status must be between 100 and 599");
    if (!rule.header.empty()) check_pattern(path + ".header", rule.header, header_name_error);
    if (!rule.header_value.empty() && rule.header.empty())
      report(path + ".header_value", "header_value needs header");
    if (!positions_.written(path + ".class")) report(path, "a classify rule needs a class");
  }

  void check_reconcile(const std::string& path, const policy::Tool& tool) {
    const auto& reconcile = tool.reconcile;
    const bool is_write = tool.effect != Effect::read;
    for (const char* key : {".reconcile", ".idempotency", ".receipt"})
      if (!is_write && positions_.written(path + key))
        report(path + key, std::string(key + 1) + " applies to write and money tools only; tool '" +
                               tool.name + "' has effect read");
    if (!is_write) return;
    const auto& query = reconcile.query;
    if (reconcile.mode == ReconcileMode::query) {
      if (query.url.empty())
        report(path + ".reconcile.mode", "reconcile mode query needs reconcile.query.url");
      else check_url_template(path + ".reconcile.query.url", query.url);
      if (query.found.empty())
        report(path + ".reconcile.mode", "reconcile mode query needs reconcile.query.found (a JSON pointer that exists when the write happened)");
      else check_pattern(path + ".reconcile.query.found", query.found, policy::json_pointer_error);
    } else {
      for (const char* key : {".reconcile.query", ".reconcile.settle"})
        if (positions_.written(path + key))
          report(path + key, std::string(key + 1) + " is used only with reconcile mode query");
    }
    if (reconcile.mode == ReconcileMode::same_key && !tool.idempotency.honoured)
      report(path + ".reconcile.mode",
             "reconcile mode same_key needs a provider that honours the key (idempotency.honoured is false); use query or none");
  }

  const Config& config_;
  const SourceMap& positions_;
  std::vector<ConfigError>& errors_;
};

std::string to_lower(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string to_upper(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

void normalise(Config& config) {
  for (auto& tool : config.tools) {
    tool.match.host = to_lower(tool.match.host);
    tool.match.method = to_upper(tool.match.method);
  }
  for (auto& host : config.egress.allow_hosts) host = to_lower(host);
  for (auto& host : config.tls.intercept_hosts) host = to_lower(host);
}

void validate(const Config& config, const SourceMap& positions, std::vector<ConfigError>& errors) {
  Checker(config, positions, errors).run();
}

}  // namespace idemgate::config
