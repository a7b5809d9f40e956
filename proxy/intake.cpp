// Request intake for a call matched to a tool (guard.hpp): read the body up
// to limits.inspect_body, name the run, fingerprint the call, and hand it to
// the write path or the read path. Also forward_buffered(), for unmatched
// requests whose body was read to look for an MCP tool name.
#include "proxy/guard.hpp"

#include "ledger/ledger.hpp"
#include "policy/fingerprint.hpp"
#include "policy/reason.hpp"
#include "proxy/answers.hpp"
#include "proxy/body_budget.hpp"
#include "proxy/call.hpp"
#include "proxy/exchange.hpp"
#include "proxy/ids.hpp"
#include "proxy/messages.hpp"
#include "proxy/read_path.hpp"
#include "proxy/respond.hpp"
#include "proxy/worker.hpp"
#include "proxy/write_path.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>
#include <array>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr auto use_tuple = asio::as_tuple(use_task);

// The answer buffer a guarded call sets aside before it is sent: most tool
// answers (a JSON object, an MCP result) are a few KiB and fit without
// touching the shared budget again, and 16 KiB a call lets the default
// 256 MiB budget hold some 16,000 calls with small bodies at once. A longer
// answer grows the buffer as it arrives (exchange.cpp).
constexpr std::uint64_t first_answer_slice = 16 * 1024;

std::string run_of(const http::fields& f, const config::Config& cfg) {
  auto named = f[cfg.runs.header];
  if (!named.empty()) return std::string(named);
  auto auth = f[http::field::proxy_authorization];
  if (beast::iequals(auth.substr(0, std::min<std::size_t>(6, auth.size())), "basic ")) {
    auto decoded = decode_base64(auth.substr(6));
    auto colon = decoded.find(':');
    if (colon != std::string::npos && colon > 0) return decoded.substr(0, colon);
  }
  return "default";
}

std::vector<policy::Header> header_view(const http::fields& f) {
  std::vector<policy::Header> out;
  for (auto const& field : f) out.push_back({field.name_string(), field.value()});
  return out;
}

}  // namespace

Call::Call(ProxyStream& client_stream, beast::flat_buffer& buffer, RequestParser& request_parser,
           const Target& call_target, const policy::Tool& call_tool, const config::Config& config, Worker& w)
    : client(client_stream),
      client_buffer(buffer),
      parser(request_parser),
      req(request_parser.get()),
      target(call_target),
      tool(call_tool),
      cfg(config),
      worker(w),
      ledger(*w.ledger()),
      is_write(call_tool.effect != policy::Effect::read),
      version(request_parser.get().version()) {}

void apply_charge(Call& c, const ledger::RunCharge& charge, policy::DecisionInput& in) {
  in.run.budget = static_cast<std::uint32_t>(c.cfg.runs.budget);
  in.run.calls_used = 0;
  switch (charge.outcome) {
    case ledger::ChargeOutcome::counted: break;
    case ledger::ChargeOutcome::exhausted: in.run.calls_used = in.run.budget; break;
    case ledger::ChargeOutcome::frozen: in.run.state = policy::RunState::frozen; break;
    case ledger::ChargeOutcome::killed: in.run.state = policy::RunState::killed; break;
  }
  c.calls_used = charge.calls;
}

Task<std::optional<std::string>> read_request_body(ProxyStream& client, beast::flat_buffer& cbuf,
                                                              RequestParser& parser, const config::Config& cfg,
                                                              bool& too_large) {
  too_large = false;
  auto& req = parser.get();
  auto const limit = cfg.limits.inspect_body;
  if (parser.content_length() && *parser.content_length() > limit) {
    too_large = true;
    co_return std::nullopt;
  }
  std::string body;
  if (parser.is_done()) co_return body;
  if (beast::iequals(req[http::field::expect], "100-continue")) {
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    client.expires_after(cfg.timeouts.client_header);
    auto [ec, n] = co_await asio::async_write(client, asio::buffer(kContinue, sizeof kContinue - 1), use_tuple);
    if (ec) co_return std::nullopt;
  }
  // The parser writes into the string itself: sized to the Content-Length
  // when there is one (one allocation, no copy), else grown a chunk at a
  // time. No buffer in this coroutine's frame: a 16 KiB one made every
  // guarded request's frame a fresh large allocation, page faults and all.
  constexpr std::size_t chunk = 16 * 1024;
  while (!parser.is_done()) {
    auto const used = body.size();
    std::size_t room = chunk;
    if (auto left = parser.content_length_remaining()) room = static_cast<std::size_t>(std::clamp<std::uint64_t>(*left, 1, chunk * 4));
    body.resize(used + room);
    req.body().data = body.data() + used;
    req.body().size = room;
    if (cbuf.size() == 0) client.expires_after(cfg.timeouts.idle);
    auto [ec, n] = co_await http::async_read_some(client, cbuf, parser, use_tuple);
    body.resize(body.size() - req.body().size);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return std::nullopt;
    if (body.size() > limit) {
      too_large = true;
      co_return std::nullopt;
    }
  }
  co_return body;
}

Task<ForwardResult> guard_request(ProxyStream& client, beast::flat_buffer& client_buffer, RequestParser& parser,
                                  const Target& target, const policy::Tool& tool, const config::Config& cfg,
                                  Worker& worker, std::optional<std::string> body,
                                  std::optional<policy::McpRequest> mcp) {
  Call c(client, client_buffer, parser, target, tool, cfg, worker);
  c.run = run_of(c.req, cfg);
  c.trace_id = random_hex(16);
  if (!body) {
    bool too_large = false;
    body = co_await read_request_body(client, client_buffer, parser, cfg, too_large);
    if (!body) {
      if (!too_large) co_return ForwardResult{false};
      // A write is never forwarded uninspected; the client may still be
      // sending, so the connection closes after the answer.
      auto v = refusal(policy::ReasonCode::unclassified_fail_closed,
                       "tool '" + tool.name + "' is guarded and its body is larger than limits.inspect_body (" +
                           std::to_string(cfg.limits.inspect_body) + " bytes); nothing was sent");
      v.http_status = 413;
      c.answer_class = "policy_deny";
      co_return co_await answer_refusal(c, v);
    }
  }
  c.body = std::move(*body);
  c.agent_key = std::string(c.req[tool.idempotency.header]);
  auto const headers = header_view(c.req);
  policy::FingerprintInput fin;
  fin.method = c.req.method_string();
  fin.scheme = target.scheme;
  fin.host = target.host;
  fin.port = target.port;
  fin.target = target.origin_form;
  fin.content_type = c.req[http::field::content_type];
  fin.body = c.body;
  fin.headers = headers;
  fin.key = c.ledger.fingerprint_key();
  c.fp = policy::fingerprint(fin, tool);
  if (!tool.match.mcp_tool.empty()) {
    c.is_mcp = true;
    c.mcp = mcp ? std::move(*mcp) : policy::inspect_mcp_request(headers, c.body);
  }
  c.missing = policy::missing_required(tool, c.fp.body ? &*c.fp.body : nullptr);
  c.malformed = c.fp.malformed;
  c.keep_alive = c.req.keep_alive() && !worker.draining();
  if (c.is_write && c.fp.repeated_names) {
    // {"amount":1,"amount":2}: some servers read the first, others the last.
    // The gate cannot say which call this is (its fingerprint, its required
    // fields, what a lookup would search for), so it sends neither. As an
    // ambiguous path is, it is refused before the ledger hears of it: no
    // intent, no charge, no escalation, the same answer with the ledger down.
    c.decision = "refused";
    c.answer_class = "policy_deny";  // the reason code is the problem's (write_problem)
    co_return co_await answer_problem(c, ambiguous_body(tool.name));
  }
  // Before the ledger or the upstream hears of it: room for this body and
  // the first slice of its answer buffer in the process's budget, or 503
  // overloaded. Past this point the call is never refused for memory: an
  // answer the budget cannot buffer whole streams on past a shorter buffer.
  auto& budget = guarded_body_budget();
  auto const limit = cfg.limits.guarded_budget;
  c.body_budget = budget.try_reserve(c.body.size(), limit);
  auto const slice = std::min(cfg.limits.guarded_answer, first_answer_slice);
  if (c.body_budget) c.answer_budget = budget.try_reserve(slice, limit);
  if (!c.answer_budget) {
    c.body_budget.reset();
    c.decision = "refused";
    Problem p;
    p.status = 503;
    p.reason_code = std::string(policy::to_string(policy::ReasonCode::overloaded));
    p.title = "Too many guarded calls at once";
    p.detail = "guarded bodies and answer buffers in memory would pass limits.guarded_budget (" +
               std::to_string(cfg.limits.guarded_budget) + " bytes); nothing was sent";
    p.retry_after_s = 1;
    co_return co_await answer_problem(c, p);
  }
  if (c.is_write) co_return co_await run_write_path(c);
  co_return co_await run_read_path(c);
}

Task<ForwardResult> forward_buffered(ProxyStream& client, RequestParser& parser, const Target& target,
                                                std::string body, const config::Config& cfg, Worker& worker) {
  auto& req = parser.get();
  bool const keep_alive = req.keep_alive() && !worker.draining();
  auto const out = upstream_request(req, target, body, false);
  ExchangeOptions options;
  options.answer_limit = cfg.limits.guarded_answer;
  auto answer = co_await exchange(target, out, cfg, worker, options);
  if (answer.outcome != policy::TransportOutcome::answered) {
    Problem const p = *answer.problem;
    co_await send_problem(client, p, req.version(), false, cfg.timeouts.client_header);
    co_return ForwardResult{false};
  }
  AnswerHead head;
  head_of(answer.response, head);
  bool const sends_body = to_client(head, answer.response.body().size(),
                                    AnswerTo{req.version(), keep_alive, req.method() == http::verb::head, false});
  bool const ok = co_await write_answer(client, head, sends_body ? answer.response.body() : std::string_view(),
                                       keep_alive, answer.tail.get(), cfg, worker);
  co_return ForwardResult{ok && keep_alive};
}

}  // namespace idemgate::proxy
