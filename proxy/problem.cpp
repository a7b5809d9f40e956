// Problem details bodies (RFC 9457) with the SDK-facing `error` member.
#include "proxy/problem.hpp"

#include <boost/json/serialize.hpp>

namespace idemgate::proxy {

namespace json = boost::json;

namespace {

std::string text_of(const json::value& v) {
  if (v.is_string()) return std::string(v.get_string());
  if (v.is_null()) return {};
  return json::serialize(v);
}

const json::value* member(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  return it == o.end() ? nullptr : &it->value();
}

bool is_wait_reason(std::string_view reason) {
  return reason == "in_flight" || reason == "reconciling" || reason == "retry_after";
}

}  // namespace

std::string_view problem_error_type(const Problem& p) {
  if (is_wait_reason(p.reason_code)) return "idemgate_wait";
  if (p.extra.contains("terminal")) return "idemgate_refusal";
  return "idemgate_error";
}

std::string problem_message(const Problem& p) {
  std::string m = p.title.empty() ? p.reason_code : p.title;
  if (!p.detail.empty()) m += ": " + p.detail;
  if (!m.empty() && m.back() != '.') m += '.';
  if (auto const* q = member(p.extra, "question_for_human"); q && q->is_string() && !q->get_string().empty())
    m += " Question for a human: " + text_of(*q);
  if (auto const* k = member(p.extra, "idempotency_key"); k && k->is_string() && !k->get_string().empty())
    m += " Idempotency key: " + text_of(*k) + ".";
  auto const* attempts = member(p.extra, "attempts");
  auto const* bound = member(p.extra, "bound");
  if (attempts && bound && bound->is_int64()) {
    // The same n/(bound+1) as the Idemgate-Attempt header.
    m += " Attempts: " + text_of(*attempts) + "/" + std::to_string(bound->get_int64() + 1) +
         " (retry.bound " + text_of(*bound) + ").";
  } else if (attempts) {
    m += " Attempts: " + text_of(*attempts) + ".";
  }
  if (p.retry_after_s) m += " Retry after " + std::to_string(*p.retry_after_s) + "s.";
  return m;
}

json::object problem_object(const Problem& p) {
  json::object o;
  o["type"] = "urn:idemgate:problem:" + p.reason_code;
  o["title"] = p.title;
  o["status"] = p.status;
  o["detail"] = p.detail;
  o["reason_code"] = p.reason_code;
  if (p.retry_after_s) o["retry_after_s"] = *p.retry_after_s;
  for (auto const& kv : p.extra) o[kv.key()] = kv.value();
  o["error"] = json::object{{"type", problem_error_type(p)}, {"code", p.reason_code}, {"message", problem_message(p)}};
  return o;
}

std::string problem_json(const Problem& p) { return json::serialize(problem_object(p)); }

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

namespace {

// A write with more than one reading, refused before the ledger hears of it.
Problem no_single_reading(std::string title, std::string detail, std::string_view tool) {
  Problem p{403, "policy_deny", std::move(title), std::move(detail), std::nullopt, {}};
  p.extra["terminal"] = "abort";
  p.extra["tool"] = std::string(tool);
  return p;
}

}  // namespace

Problem ambiguous_spelling(std::string_view method, std::string_view url, std::string_view reading,
                           std::string_view tool) {
  return no_single_reading("Ambiguous request path",
                           std::string(method) + " " + std::string(url) +
                               ": servers read this path in more than one way, and read as " + std::string(reading) +
                               " it is a call of the write tool '" + std::string(tool) +
                               "'; such spellings are refused, never passed on. Send the path with plain '/' "
                               "separators and without %2F, %5C, '\\' or ';' parameters.",
                           tool);
}

Problem ambiguous_body(std::string_view tool) {
  return no_single_reading("Ambiguous request body",
                           "the JSON body names a member twice in one object; servers differ on which of the two "
                           "they read, so this call of the write tool '" + std::string(tool) +
                               "' has no single reading and is refused, never passed on. Send each member once; "
                               "nothing was sent.",
                           tool);
}

Problem upstream_tls_failed(std::string detail) {
  return {502, "upstream_tls_failed", "Upstream TLS failed", std::move(detail), std::nullopt, {}};
}

}  // namespace idemgate::proxy
