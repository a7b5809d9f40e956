// One upstream send of a guarded call (see dispatch.hpp).
#include "proxy/dispatch.hpp"

#include "proxy/mcp_answer.hpp"
#include "proxy/messages.hpp"
#include "ledger/executor.hpp"

#include <boost/beast/http/message.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;

namespace {

std::vector<policy::Header> header_view(const boost::beast::http::fields& f) {
  std::vector<policy::Header> out;
  for (auto const& field : f) out.push_back({field.name_string(), field.value()});
  return out;
}

void set_class(Sent& s, policy::AnswerClass cls, const char* reason) {
  s.cls.answer_class = cls;
  s.cls.should_retry = policy::is_retryable(cls);
  s.cls.reason = reason;
}

// An MCP server answers 200 whatever the tool did: the JSON-RPC message
// inside (a JSON body or an SSE event) says what happened, and a 2xx with
// no response to the call (a stream closed early, a 202) is not a result.
// A 400 or 404 carrying a JSON-RPC error is the transport refusing the
// session (missing or expired Mcp-Session-Id): the tool did not run.
void reclass_mcp_answer(const Call& c, Sent& s) {
  auto const& r = s.answer.response;
  auto const content_type = r[boost::beast::http::field::content_type];
  auto const status = r.result_int();
  if (s.cls.answer_class == policy::AnswerClass::ok) {
    if (auto mcp = classify_mcp_answer(content_type, r.body(), c.tool)) {
      set_class(s, *mcp, "MCP JSON-RPC message");
    } else if (!s.answer.tail) {  // an answer past the buffer streamed on whole: the status stands
      bool const write = c.tool.effect != policy::Effect::read;
      set_class(s, write ? policy::AnswerClass::unknown : policy::AnswerClass::transient,
                "MCP: a 2xx answer with no JSON-RPC response to the call");
    }
  } else if (status == 400 || status == 404) {
    auto message = mcp_response_message(content_type, r.body());
    if (message && message->is_object() && message->get_object().contains("error"))
      set_class(s, policy::AnswerClass::transient, "MCP: the session was refused before the tool ran");
  }
}

}  // namespace

std::chrono::milliseconds attempt_lease(const config::Config& cfg) {
  auto const& t = cfg.timeouts;
  // The write of the request is bounded by timeouts.idle (see exchange()).
  return t.upstream_connect + t.idle + t.upstream_response + t.outcome_record;
}

Task<Sent> send_upstream(Call& c, std::string_view key) {
  auto const out = upstream_request(c.req, c.target, c.body, true,
                                    key.empty() ? std::string_view() : std::string_view(c.tool.idempotency.header), key);
  Sent s;
  // Writes go out on a fresh connection or one whose Keep-Alive timeout is
  // far off, and are sent again after a stale one only when the provider
  // deduplicates on the key; reads may always be sent again.
  ExchangeOptions options;
  options.answer_limit = c.cfg.limits.guarded_answer;
  options.answer_budget = c.answer_budget ? &*c.answer_budget : nullptr;
  options.reuse = c.is_write ? Reuse::known_alive : Reuse::any;
  options.resend_if_stale =
      !c.is_write || (c.tool.idempotency.honoured && c.tool.reconcile.mode == policy::ReconcileMode::same_key);
  s.answer = co_await exchange(c.target, out, c.cfg, c.worker, options);
  s.at = std::chrono::system_clock::now();
  if (s.answer.cut_by_budget) c.answer_cut_by_budget = true;
  bool const answered = s.answer.outcome == policy::TransportOutcome::answered;
  std::vector<policy::Header> hv;
  if (answered) hv = header_view(s.answer.response);
  policy::Answer a{s.answer.outcome, answered ? static_cast<int>(s.answer.response.result_int()) : 0, hv};
  s.cls = policy::classify(a, c.tool, s.at);
  if (c.is_mcp && answered) reclass_mcp_answer(c, s);
  s.egress_refused = s.answer.problem && s.answer.problem->reason_code == "egress_denied";
  if (s.egress_refused) s.cls.answer_class = policy::AnswerClass::policy_deny;
  co_return s;
}

}  // namespace idemgate::proxy
