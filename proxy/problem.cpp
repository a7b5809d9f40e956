// Problem details bodies (RFC 9457).
#include "proxy/problem.hpp"

#include <boost/json/serialize.hpp>

namespace idemgate::proxy {

std::string problem_json(const Problem& p) {
  boost::json::object o;
  o["type"] = "urn:idemgate:problem:" + p.reason_code;
  o["title"] = p.title;
  o["status"] = p.status;
  o["detail"] = p.detail;
  o["reason_code"] = p.reason_code;
  if (p.retry_after_s) o["retry_after_s"] = *p.retry_after_s;
  for (auto const& kv : p.extra) o[kv.key()] = kv.value();
  return boost::json::serialize(o);
}

Problem bad_request(std::string detail) {
  return {400, "malformed_request", "Malformed request", std::move(detail), std::nullopt, {}};
}

Problem upstream_connect_failed(std::string detail) {
  return {502, "upstream_connect_failed", "Upstream connection failed", std::move(detail), std::nullopt, {}};
}

Problem upstream_timed_out(std::string detail) {
  return {504, "upstream_timeout", "Upstream timed out", std::move(detail), std::nullopt, {}};
}

Problem egress_denied(std::string detail) {
  return {403, "egress_denied", "Egress denied", std::move(detail), std::nullopt, {}};
}

Problem ambiguous_spelling(std::string_view method, std::string_view url, std::string_view reading,
                           std::string_view tool) {
  Problem p{403, "policy_deny", "Ambiguous request path",
            std::string(method) + " " + std::string(url) +
                ": servers read this path in more than one way, and read as " + std::string(reading) +
                " it is a call of the write tool '" + std::string(tool) +
                "'; such spellings are refused, never passed on. Send the path with plain '/' separators and "
                "without %2F, %5C, '\\' or ';' parameters.",
            std::nullopt, {}};
  p.extra["terminal"] = "abort";
  p.extra["tool"] = std::string(tool);
  return p;
}

Problem upstream_tls_failed(std::string detail) {
  return {502, "upstream_tls_failed", "Upstream TLS failed", std::move(detail), std::nullopt, {}};
}

}  // namespace idemgate::proxy
