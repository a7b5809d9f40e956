// The answers of a guarded call (see answers.hpp).
#include "proxy/answers.hpp"

#include "ledger/ledger.hpp"
#include "policy/headers.hpp"
#include "policy/reason.hpp"
#include "proxy/ledger_room.hpp"
#include "proxy/log.hpp"
#include "proxy/mcp_answer.hpp"
#include "proxy/messages.hpp"
#include "proxy/outcome_recorder.hpp"
#include "proxy/respond.hpp"
#include "proxy/worker.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>

#include <charconv>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace json = boost::json;
using policy::VerdictKind;

namespace {

constexpr auto use_tuple = asio::as_tuple(use_task);

unsigned seconds_up(std::chrono::milliseconds d) {
  return static_cast<unsigned>(std::max<long>(1, (d.count() + 999) / 1000));
}

std::string_view shown_class(const Call& c) {
  if (!c.answer_class.empty()) return c.answer_class;
  if (c.intent && !c.intent->answer_class.empty()) return c.intent->answer_class;
  return "pending";
}

// The numbers an answer's Idemgate-* fields show, written where the fields'
// views can point.
struct IdemgateNumbers {
  char attempt[24];
  char intent[24];
};

std::string_view print(char (&out)[24], std::int64_t n) {
  return {out, static_cast<std::size_t>(std::to_chars(out, out + sizeof out, n).ptr - out)};
}

// The Idemgate-* fields of this call's answer, in order, each handed to
// put(name, value); the values are views into c and into `numbers`.
template <class Put>
void idemgate_fields(const Call& c, IdemgateNumbers& numbers, Put&& put) {
  put("Idemgate-Class", shown_class(c));
  put("Idemgate-Decision", std::string_view(c.decision));
  if (c.intent && c.is_write) put("Idemgate-Key", std::string_view(c.intent->key));
  int const shown = c.attempt ? c.attempt : (c.intent ? c.intent->attempts_spent() : 0);
  auto* const end = std::to_chars(numbers.attempt, numbers.attempt + sizeof numbers.attempt, shown).ptr;
  *end = '/';
  auto const last = std::to_chars(end + 1, numbers.attempt + sizeof numbers.attempt, c.tool.retry.bound + 1).ptr;
  put("Idemgate-Attempt", std::string_view(numbers.attempt, static_cast<std::size_t>(last - numbers.attempt)));
  if (c.intent) put("Idemgate-Intent", print(numbers.intent, c.intent->id));
  put("Idemgate-Tool", std::string_view(c.tool.name));
}

void fill_idemgate_headers(const Call& c, http::fields& f) {
  IdemgateNumbers numbers;
  idemgate_fields(c, numbers, [&f](std::string_view name, std::string_view value) { f.set(name, value); });
}

// A matched call's answer goes to this client.
AnswerTo answer_to(const Call& c) {
  return AnswerTo{c.version, c.keep_alive, c.req.method() == http::verb::head, true};
}

// `head` as head_of left it (its views valid until this returns), with a
// body of which the first bytes are `body` (all of it unless tail is set);
// `extra` adds the fields a replay says more (before the Idemgate-* ones).
template <class Extra>
Task<ForwardResult> write_response(Call& c, AnswerHead& head, std::string_view body, AnswerTail* tail,
                                              Extra extra) {
  auto const to = answer_to(c);
  bool const sends_body = to_client(head, body.size(), to);
  extra(head);
  // No Idemgate-* field is left from upstream (to_client dropped them):
  // each is appended, as set() would.
  IdemgateNumbers numbers;
  idemgate_fields(c, numbers, [&head](std::string_view name, std::string_view value) {
    head.append_field(http::field::unknown, name, value);
  });
  bool const ok = co_await write_answer(c.client, head, sends_body ? body : std::string_view(), to.keep_alive, tail,
                                        c.cfg, c.worker);
  log_decision(c, head.status);
  co_return ForwardResult{ok && c.keep_alive};
}

Task<ForwardResult> write_problem(Call& c, const Problem& p, const char* should_retry) {
  http::fields extra;
  fill_idemgate_headers(c, extra);
  if (should_retry && !c.tool.should_retry_header.empty()) extra.set(c.tool.should_retry_header, should_retry);
  c.worker.stats().problems.fetch_add(1, std::memory_order_relaxed);
  bool ok = false;
  if (c.is_mcp) {
    // The MCP client's tool result, so that the model reads why: an SDK
    // turns a non-2xx answer to its POST into a transport error and the
    // tool result is lost. Idemgate-* headers as for any refusal.
    ok = co_await send_own_answer(c.client, 200, "application/json", mcp_refusal_body(p, c.mcp.id), p.retry_after_s,
                                  c.version, c.keep_alive, c.cfg.timeouts.client_header, &extra);
  } else {
    ok = co_await send_problem(c.client, p, c.version, c.keep_alive, c.cfg.timeouts.client_header, &extra);
  }
  if (c.reason_code.empty()) c.reason_code = p.reason_code;
  log_decision(c, c.is_mcp ? 200 : p.status);
  co_return ForwardResult{ok && c.keep_alive};
}

std::string_view stored_header(const ledger::Headers& headers, std::string_view name) {
  for (auto const& [k, v] : headers)
    if (policy::iequals(k, name)) return v;
  return {};
}

// The members every problem about this call carries.
void describe_call(const Call& c, Problem& p) {
  auto& x = p.extra;
  x["tool"] = c.tool.name;
  x["run"] = c.run;
  x["fingerprint"] = c.fp.hex;
  x["idempotency_key"] = c.intent && c.is_write ? json::value(c.intent->key) : json::value(nullptr);
  x["attempts"] = c.intent ? c.intent->attempts_spent() : c.attempt;
  x["bound"] = c.tool.retry.bound;
  x["trace_id"] = c.trace_id;
  if (c.intent) x["intent"] = c.intent->id;
}

}  // namespace

policy::Verdict refusal(policy::ReasonCode reason, std::string detail) {
  policy::Verdict v;
  v.kind = VerdictKind::refuse;
  v.reason = reason;
  v.http_status = policy::http_status_of(reason);
  v.terminal = policy::terminal_of(reason);
  v.detail = std::move(detail);
  return v;
}

Task<ForwardResult> answer_upstream(Call& c, UpstreamAnswer& answer) {
  AnswerHead head;
  head_of(answer.response, head);
  co_return co_await write_response(c, head, answer.response.body(), answer.tail.get(), [](AnswerHead&) {});
}

Task<ForwardResult> answer_replay(Call& c) {
  auto& intent = *c.intent;
  c.answer_class = intent.answer_class.empty() ? "ok" : intent.answer_class;
  // An MCP client reads a tool result: a stored answer with no JSON-RPC
  // response in it (cut at ledger.response_cap, or found by a query lookup)
  // is replaced by one that says the call completed and where its receipt is.
  bool const mcp_unreadable = c.is_mcp && intent.response &&
                              !mcp_response_message(stored_header(intent.response->headers, "Content-Type"),
                                                    intent.response->body);
  if (!intent.response || mcp_unreadable) {
    // Settled by an operator (complete with a receipt): the receipt is the answer.
    json::object done{{"receipt", intent.receipt}, {"idempotency_key", intent.key},
                      {"settled_by", intent.response ? "idemgate" : "operator"}};
    std::string body = json::serialize(done);
    if (c.is_mcp) {
      std::string text = (intent.response ? "Completed earlier; the stored answer cannot be replayed whole"
                                          : "Completed by an operator") +
                         std::string("; receipt: ") + (intent.receipt.empty() ? "none recorded" : intent.receipt) +
                         "; idempotency key: " + intent.key;
      json::object result{{"content", json::array{json::object{{"type", "text"}, {"text", std::move(text)}}}},
                          {"structuredContent", std::move(done)}};
      body = json::serialize(json::object{{"jsonrpc", "2.0"}, {"id", nullptr}, {"result", std::move(result)}});
    }
    intent.response = ledger::StoredResponse{200, {{"Content-Type", "application/json"}}, std::move(body), false};
  }
  auto const& stored = *intent.response;
  auto headers = stored.headers;
  auto body = stored.body;
  if (c.is_mcp) shape_mcp_replay(headers, body, c.mcp.id, c.req["Mcp-Session-Id"]);
  else std::erase_if(headers, [](const auto& h) { return is_mcp_session_header(h.first); });
  AnswerHead head;
  head_of(stored.status, headers, head);
  bool const replayed = c.decision == "replayed";
  co_return co_await write_response(c, head, body, nullptr, [&](AnswerHead& h) {
    // The stored body was cut at ledger.response_cap: say so, never pass it
    // off as the whole answer.
    if (stored.truncated) h.set("Idemgate-Replay-Truncated", "true");
    if (replayed) h.set("Idempotent-Replayed", "true");
  });
}

Task<ForwardResult> answer_wait(Call& c, const policy::Verdict& v) {
  c.decision = "wait";
  c.reason_code = std::string(policy::to_string(v.wait_reason));
  if (v.wait_reason == policy::WaitReason::in_flight) c.answer_class = "pending";
  Problem p;
  p.status = static_cast<unsigned>(v.http_status ? v.http_status : 409);
  p.reason_code = c.reason_code;
  p.title = v.wait_reason == policy::WaitReason::in_flight   ? "The same call is in flight"
            : v.wait_reason == policy::WaitReason::reconciling ? "The outcome is being reconciled"
                                                               : "Wait before retrying";
  p.detail = v.detail;
  p.retry_after_s = seconds_up(v.retry_after ? *v.retry_after : std::chrono::milliseconds(1000));
  describe_call(c, p);
  // Retrying is safe: idemgate reconciles before anything is re-sent.
  co_return co_await write_problem(c, p, "true");
}

Task<ForwardResult> answer_refusal(Call& c, const policy::Verdict& v) {
  c.decision = "refused";
  c.reason_code = std::string(policy::to_string(v.reason));
  if (c.answer_class.empty()) {
    bool const by_policy = v.reason == policy::ReasonCode::policy_deny ||
                           v.reason == policy::ReasonCode::pending_approval ||
                           v.reason == policy::ReasonCode::egress_denied;
    c.answer_class = by_policy ? "policy_deny" : std::string(shown_class(c));
  }
  Problem p;
  p.status = static_cast<unsigned>(v.http_status ? v.http_status : 403);
  p.reason_code = c.reason_code;
  p.title = "Refused: " + c.reason_code;
  p.detail = v.detail;
  if (v.retry_after) p.retry_after_s = seconds_up(*v.retry_after);
  describe_call(c, p);
  auto& x = p.extra;
  x["terminal"] = policy::to_string(v.terminal);
  x["question_for_human"] = policy::question_for_human(v.reason);
  x["calls_used"] = c.calls_used;
  x["budget"] = c.cfg.runs.budget;
  if (c.intent && !c.intent->receipt.empty()) x["receipt"] = c.intent->receipt;
  if (c.malformed) x["body_malformed"] = true;
  bool const ledger_ok = v.reason != policy::ReasonCode::ledger_unavailable;
  json::array tried;
  if (ledger_ok) {
    std::string run = c.run;
    auto intents = co_await c.ledger.list_intents_by_run(std::move(run), 20);
    if (intents) {
      for (auto const& i : *intents)
        tried.push_back(json::object{{"name", i.tool}, {"fingerprint", i.fingerprint}, {"class", i.answer_class}});
    }
  }
  x["tools_tried"] = std::move(tried);
  if (ledger_ok) {
    ledger::EscalationRequest er;
    er.run = c.run;
    if (c.intent) er.intent_id = c.intent->id;
    er.reason_code = c.reason_code;
    er.package_json = problem_json(p);
    auto id = co_await with_ledger_room([&] { return c.ledger.persist_escalation(er); });
    if (id) {
      x["escalation_id"] = *id;
    } else if (!c.sent) {
      // No package, no refusal: nothing was sent, the agent comes back later.
      co_return co_await answer_ledger_down(c);
    } else {
      // Something was sent: the answer must stay the truth about it. The
      // package is persisted in the background until it lands.
      x["escalation_id"] = nullptr;
      persist_escalation_later(co_await asio::this_coro::executor, c.ledger, std::move(er));
    }
    if (c.intent) {
      std::string reason = c.reason_code;
      auto counted = co_await c.ledger.record_refusal(c.intent->id, std::move(reason));
      (void)counted;  // a dashboard count; the refusal stands without it
    }
  }
  co_return co_await write_problem(c, p, "false");
}

Task<ForwardResult> answer_problem(Call& c, const Problem& p) {
  co_return co_await write_problem(c, p, nullptr);
}

Task<ForwardResult> answer_ledger_down(Call& c) {
  if (c.sent) {
    policy::Verdict v;
    v.kind = VerdictKind::wait;
    v.wait_reason = policy::WaitReason::reconciling;
    v.http_status = 409;
    v.retry_after = std::chrono::seconds(2);
    v.detail = "the request was sent upstream and the ledger failed before its outcome was recorded; the outcome "
               "is unknown and idemgate reconciles it with the provider before anything is re-sent";
    c.answer_class = "unknown";
    co_return co_await answer_wait(c, v);
  }
  auto v = refusal(policy::ReasonCode::ledger_unavailable,
                   "the ledger could not be read or written; this request sent nothing upstream");
  v.retry_after = std::chrono::seconds(1);
  co_return co_await answer_refusal(c, v);
}

void log_decision(Call& c, unsigned status) {
  auto const us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - c.start);
  auto const shown = shown_class(c);
  // Appended straight to the line (one per request on the network thread):
  // no JSON document built and serialised.
  LogLine line("decision");
  line.add("run", c.run).add("tool", c.tool.name).add("class", shown).add("decision", c.decision);
  if (c.intent && c.is_write) {
    line.add("key", c.intent->key);
  } else {
    line.add_null("key");
  }
  line.add("attempt", c.attempt)
      .add("bound", c.tool.retry.bound)
      .add("status", status)
      .add("method", std::string_view(c.req.method_string()))
      .add("host", c.target.host)
      .add("fingerprint", c.fp.hex)
      .add("trace_id", c.trace_id)
      .add("latency_ms", static_cast<std::int64_t>(us.count() / 1000))
      .add("latency_us", static_cast<std::int64_t>(us.count()));
  if (!c.reason_code.empty()) line.add("reason_code", c.reason_code);
  if (c.intent) line.add("intent", static_cast<std::int64_t>(c.intent->id));
  if (c.answer_cut_by_budget) line.add("answer_cut", "limits.guarded_budget");
  line.emit();
  c.worker.decisions().count(c.tool.name, c.decision, shown, c.reason_code);
}

}  // namespace idemgate::proxy
