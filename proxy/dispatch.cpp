// One upstream send of a guarded call (see dispatch.hpp).
#include "proxy/dispatch.hpp"

#include "proxy/mcp_answer.hpp"
#include "proxy/messages.hpp"

#include <boost/beast/http/message.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;

namespace {

std::vector<policy::Header> header_view(const boost::beast::http::fields& f) {
  std::vector<policy::Header> out;
  for (auto const& field : f) out.push_back({field.name_string(), field.value()});
  return out;
}

}  // namespace

std::chrono::milliseconds attempt_lease(const config::Config& cfg) {
  auto const& t = cfg.timeouts;
  // The write of the request is bounded by timeouts.idle (see exchange()).
  return t.upstream_connect + t.idle + t.upstream_response + t.outcome_record;
}

asio::awaitable<Sent> send_upstream(Call& c, std::string_view key) {
  StringRequest out = upstream_request(c.req, c.target, c.body, true);
  if (!key.empty()) out.set(c.tool.idempotency.header, key);
  Sent s;
  // Writes go out on a fresh connection or one whose Keep-Alive timeout is
  // far off, and are sent again after a stale one only when the provider
  // deduplicates on the key; reads may always be sent again.
  ExchangeOptions options;
  options.answer_limit = c.cfg.limits.guarded_answer;
  options.reuse = c.is_write ? Reuse::known_alive : Reuse::any;
  options.resend_if_stale =
      !c.is_write || (c.tool.idempotency.honoured && c.tool.reconcile.mode == policy::ReconcileMode::same_key);
  s.answer = co_await exchange(c.target, out, c.cfg, c.worker, options);
  s.at = std::chrono::system_clock::now();
  bool const answered = s.answer.outcome == policy::TransportOutcome::answered;
  std::vector<policy::Header> hv;
  if (answered) hv = header_view(s.answer.response);
  policy::Answer a{s.answer.outcome, answered ? s.answer.response.result_int() : 0, hv};
  s.cls = policy::classify(a, c.tool, s.at);
  // An MCP server answers 200 whatever the tool did: the JSON-RPC message
  // inside (a JSON body or an SSE event) says what happened.
  if (c.is_mcp && answered && s.cls.answer_class == policy::AnswerClass::ok) {
    auto const& r = s.answer.response;
    if (auto mcp = classify_mcp_answer(r[boost::beast::http::field::content_type], r.body(), c.tool)) {
      s.cls.answer_class = *mcp;
      s.cls.should_retry = policy::is_retryable(*mcp);
      s.cls.reason = "MCP JSON-RPC message";
    }
  }
  s.egress_refused = s.answer.problem && s.answer.problem->reason_code == "egress_denied";
  if (s.egress_refused) s.cls.answer_class = policy::AnswerClass::policy_deny;
  co_return s;
}

}  // namespace idemgate::proxy
