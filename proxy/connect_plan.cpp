// CONNECT planning (see connect_plan.hpp).
#include "proxy/connect_plan.hpp"

#include "policy/pattern.hpp"
#include "policy/reason.hpp"

namespace idemgate::proxy {

namespace {

std::string where(const Target& t) { return t.host + ":" + std::to_string(t.port); }

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (auto const& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

Problem intercept_required(const Target& target, const std::vector<std::string>& tools) {
  auto const reason = policy::ReasonCode::intercept_required;
  Problem p;
  p.status = static_cast<unsigned>(policy::http_status_of(reason));
  p.reason_code = std::string(policy::to_string(reason));
  p.title = "TLS interception required";
  p.detail = "CONNECT " + where(target) + " reaches tools (" + joined(tools) +
             ") that cannot be guarded through a blind tunnel, and tls.intercept is false; nothing was sent. "
             "Set tls.intercept: true (with tls.ca_cert and tls.ca_key from `idemgate ca init`), or send plain "
             "http:// requests in absolute form (undici: ProxyAgent proxyTunnel: false), or use a gateway route";
  p.extra["terminal"] = policy::to_string(policy::terminal_of(reason));
  p.extra["question_for_human"] = policy::question_for_human(reason);
  p.extra["config_key"] = "tls.intercept";
  boost::json::array names;
  for (auto const& t : tools) names.emplace_back(t);
  p.extra["tools"] = std::move(names);
  return p;
}

}  // namespace

std::vector<std::string> tools_on(const config::Config& cfg, const Target& target) {
  std::vector<std::string> names;
  for (auto const& t : cfg.tools) {
    if ((t.match.port == 0 || t.match.port == target.port) && policy::host_matches(t.match.host, target.host))
      names.push_back(t.name);
  }
  return names;
}

ConnectPlan plan_connect(const config::Config& cfg, const Target& target, bool can_intercept) {
  auto const tools = tools_on(cfg, target);
  if (!tools.empty()) {
    if (can_intercept) return {ConnectAction::intercept, std::nullopt};
    return {ConnectAction::refuse, intercept_required(target, tools)};
  }
  if (can_intercept) {
    for (auto const& glob : cfg.tls.intercept_hosts)
      if (policy::host_matches(glob, target.host)) return {ConnectAction::intercept, std::nullopt};
  }
  if (cfg.unmatched == policy::Unmatched::deny) {
    Problem p{403, "policy_deny", "No tool matches",
              "CONNECT " + where(target) + " would be a blind tunnel (no tool can match inside it) and unmatched is deny",
              std::nullopt, {}};
    return {ConnectAction::refuse, std::move(p)};
  }
  return {ConnectAction::tunnel, std::nullopt};
}

}  // namespace idemgate::proxy
