// The enforcement path (see guard.hpp). Reading order: guard_request() builds
// a Guard, Guard::run() gathers the decision inputs from the ledger, calls
// policy::decide() once, and carries out the verdict.
#include "proxy/guard.hpp"

#include "ledger/ledger.hpp"
#include "policy/classify.hpp"
#include "policy/decide.hpp"
#include "policy/fingerprint.hpp"
#include "policy/json_pointer.hpp"
#include "policy/reason.hpp"
#include "policy/reconcile.hpp"
#include "proxy/body_budget.hpp"
#include "proxy/exchange.hpp"
#include "proxy/ids.hpp"
#include "proxy/log.hpp"
#include "proxy/read_tracker.hpp"
#include "proxy/respond.hpp"
#include "proxy/worker.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>

#include <array>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using policy::AnswerClass;
using policy::VerdictKind;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
using SysClock = std::chrono::system_clock;

SysClock::time_point to_sys(const ledger::TimePoint& t) { return SysClock::time_point(t.time_since_epoch()); }

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

ledger::Headers headers_of(const http::fields& f) {
  ledger::Headers out;
  for (auto const& field : f) out.emplace_back(std::string(field.name_string()), std::string(field.value()));
  return out;
}

policy::IntentState view_state(ledger::IntentState s) {
  switch (s) {
    case ledger::IntentState::reserved: return policy::IntentState::none;  // begin_attempt's CAS decides
    case ledger::IntentState::dispatched: return policy::IntentState::in_flight;
    case ledger::IntentState::completed: return policy::IntentState::completed;
    case ledger::IntentState::unknown: return policy::IntentState::unknown;
    case ledger::IntentState::denied: return policy::IntentState::denied;
    case ledger::IntentState::retryable: return policy::IntentState::retryable;
  }
  return policy::IntentState::unavailable;
}

std::string receipt_from(const policy::Tool& tool, std::string_view body) {
  return policy::receipt_of(tool, body).value_or(std::string());
}

ledger::IntentState ledger_state_for(AnswerClass c) {
  switch (c) {
    case AnswerClass::ok: return ledger::IntentState::completed;
    case AnswerClass::rate_limited:
    case AnswerClass::transient: return ledger::IntentState::retryable;
    case AnswerClass::unknown: return ledger::IntentState::unknown;
    default: return ledger::IntentState::denied;
  }
}

}  // namespace

asio::awaitable<std::optional<std::string>> read_request_body(ProxyStream& client, beast::flat_buffer& cbuf,
                                                              http::request_parser<http::buffer_body>& parser,
                                                              const config::Config& cfg, bool& too_large) {
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
  std::array<char, 16 * 1024> buf;
  while (!parser.is_done()) {
    req.body().data = buf.data();
    req.body().size = buf.size();
    if (cbuf.size() == 0) client.expires_after(cfg.timeouts.idle);
    auto [ec, n] = co_await http::async_read_some(client, cbuf, parser, use_tuple);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return std::nullopt;
    body.append(buf.data(), buf.size() - req.body().size);
    if (body.size() > limit) {
      too_large = true;
      co_return std::nullopt;
    }
  }
  co_return body;
}

namespace {

// The upstream request: the client's header minus hop-by-hop and Idemgate-*
// headers, in origin-form, with the body in memory.
StringRequest upstream_request(const http::request<http::buffer_body>& in, const Target& target, std::string body) {
  StringRequest out{in.method(), target.origin_form, 11};
  for (auto const& f : in) out.insert(f.name_string(), f.value());
  if (in.method() == http::verb::unknown) out.method_string(in.method_string());
  strip_hop_by_hop(out, true);
  out.erase(http::field::expect);
  out.erase(http::field::content_length);
  out.set(http::field::host, target.authority());
  add_via(out, in.version());
  out.body() = std::move(body);
  return out;
}

// The answer the client sees for an upstream answer or a stored one.
StringResponse client_response(int status, const ledger::Headers& headers, std::string body, unsigned version,
                               bool keep_alive) {
  StringResponse res{static_cast<http::status>(status), version};
  for (auto const& [name, value] : headers) res.insert(name, value);
  strip_hop_by_hop(res, false);
  res.erase(http::field::content_length);
  add_via(res, 11);
  res.body() = std::move(body);
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

class Guard {
public:
  Guard(ProxyStream& client, beast::flat_buffer& cbuf, http::request_parser<http::buffer_body>& parser,
        const Target& target, const policy::Tool& tool, const config::Config& cfg, Worker& worker)
      : client_(client),
        cbuf_(cbuf),
        parser_(parser),
        req_(parser.get()),
        target_(target),
        tool_(tool),
        cfg_(cfg),
        worker_(worker),
        ledger_(*worker.ledger()),
        is_write_(tool.effect != policy::Effect::read),
        version_(req_.version()) {}

  asio::awaitable<ForwardResult> run(std::optional<std::string> body) {
    if (!body) {
      bool too_large = false;
      body = co_await read_request_body(client_, cbuf_, parser_, cfg_, too_large);
      if (!body) {
        if (!too_large) co_return ForwardResult{false};
        Problem const p{413, "body_too_large", "Request body too large",
                        "tool '" + tool_.name + "' is guarded and its body is larger than limits.inspect_body (" +
                            std::to_string(cfg_.limits.inspect_body) + " bytes): a write is never forwarded uninspected"};
        co_await send_problem(client_, p, version_, false, cfg_.timeouts.client_header);
        decision_ = "refused";
        reason_code_ = p.reason_code;
        log_decision(p.status);
        co_return ForwardResult{false};
      }
    }
    body_ = std::move(*body);
    run_ = run_of(req_, cfg_);
    trace_id_ = random_hex(16);
    agent_key_ = std::string(req_[tool_.idempotency.header]);
    auto const headers = header_view(req_);
    policy::FingerprintInput fin;
    fin.method = req_.method_string();
    fin.scheme = target_.scheme;
    fin.host = target_.host;
    fin.port = target_.port;
    fin.target = target_.origin_form;
    fin.content_type = req_[http::field::content_type];
    fin.body = body_;
    fin.headers = headers;
    fp_ = policy::fingerprint(fin, tool_);
    missing_ = policy::missing_required(tool_, fp_.body ? &*fp_.body : nullptr);
    if (fp_.malformed) malformed_ = true;
    keep_alive_ = req_.keep_alive() && !worker_.draining();

    // Before the ledger or the upstream hears of it: room for this body and
    // one answer buffer in the process's budget, or 503 overloaded.
    budget_ = guarded_body_budget().try_reserve(body_.size() + cfg_.limits.guarded_answer, cfg_.limits.guarded_budget);
    if (!budget_) {
      policy::Verdict v;
      v.retry_after = std::chrono::seconds(1);
      v.detail = "guarded bodies in memory would pass limits.guarded_budget (" +
                 std::to_string(cfg_.limits.guarded_budget) + " bytes); nothing was sent";
      co_return co_await answer_wait(503, "overloaded", "Too many guarded calls at once", v);
    }

    if (!is_write_) co_return co_await run_read();
    co_return co_await run_write();
  }

private:
  // ---- decision inputs -------------------------------------------------

  asio::awaitable<bool> charge_run(policy::DecisionInput& in) {
    auto kind = is_write_ ? ledger::CallKind::write : ledger::CallKind::read;
    std::string run = run_;
    auto charge = co_await ledger_.count_call(std::move(run), cfg_.runs.budget, kind);
    if (!charge) co_return false;
    apply_charge(*charge, in);
    co_return true;
  }

  asio::awaitable<ForwardResult> run_write() {
    policy::DecisionInput in;
    in.now = SysClock::now();
    in.missing_required = missing_;
    in.agent_key.present = !agent_key_.empty();

    // Refusals that depend only on the request and the tool come before any
    // reservation: a refused request must not claim the fingerprint (a
    // require-mode call without its key would otherwise bind a minted key).
    if (tool_.policy != policy::PolicyAction::pending_approval) {
      auto pre = policy::decide(tool_, in, agent_key_);
      if (pre.kind == VerdictKind::refuse) co_return co_await refuse(pre);
    }

    ledger::ReserveRequest rr;
    rr.run = run_;
    rr.tool = tool_.name;
    rr.scope = tool_.fingerprint.scope == policy::FingerprintScope::run ? run_ : std::string();
    rr.fingerprint = fp_.hex;
    bool const use_agent_key = tool_.idempotency.mode != policy::KeyMode::inject && !agent_key_.empty();
    rr.key = use_agent_key ? agent_key_ : mint_uuid_v4();
    rr.agent_key = agent_key_;
    rr.window = tool_.fingerprint.window;
    rr.unknown_ttl = tool_.reconcile.ttl;
    ledger::RequestSnapshot snap{std::string(req_.method_string()), target_.scheme + "://" + target_.authority() +
                                                                        target_.origin_form,
                                 headers_of(req_), body_};
    // The run's charge and the reservation are independent: both go to the
    // ledger at once (and can share one durable commit there).
    std::string run = run_;
    auto charge_op = ledger_.count_call(std::move(run), cfg_.runs.budget, ledger::CallKind::write);
    auto reserve_op = ledger_.reserve_intent(std::move(rr), std::move(snap));
    auto [charge, reservation] = co_await (std::move(charge_op) && std::move(reserve_op));
    if (!charge || !reservation) co_return co_await ledger_down();
    apply_charge(*charge, in);
    intent_ = reservation->intent;
    have_intent_ = true;
    bool const fresh = reservation->outcome == ledger::ReserveOutcome::reserved;
    bool const mismatch = reservation->outcome == ledger::ReserveOutcome::key_mismatch;
    if (!fresh && !mismatch && use_agent_key && agent_key_ != intent_.key)
      in.agent_key.fingerprint_bound_to_other_key = true;
    // A key bound to another payload says nothing about this payload's
    // intent (the row returned is the other one): refuse on the key alone.
    in.agent_key.bound_to_other_fingerprint = mismatch;
    if (mismatch) have_intent_ = false;
    if (!mismatch) in.intent = view_of(intent_);
    if (tool_.policy == policy::PolicyAction::pending_approval && have_intent_) {
      auto ok = co_await approved(intent_.id);
      if (!ok) co_return co_await ledger_down();
      in.intent.approved = *ok;
    }

    auto verdict = policy::decide(tool_, in, agent_key_);
    if (verdict.kind == VerdictKind::dispatch && verdict.dispatch_kind == policy::DispatchKind::new_intent &&
        worker_.reads().validation_seen(run_, tool_.name)) {
      // Validation is retried once with a corrected payload, never twice.
      auto failures = co_await validation_failures();
      if (!failures) co_return co_await ledger_down();
      if (*failures >= 2) {
        verdict = refusal(policy::ReasonCode::validation_repeated,
                          "tool '" + tool_.name + "' already failed validation with two payloads in this run");
      }
    }
    co_return co_await carry_out(verdict);
  }

  void apply_charge(const ledger::RunCharge& charge, policy::DecisionInput& in) {
    in.run.budget = static_cast<std::uint32_t>(cfg_.runs.budget);
    in.run.calls_used = 0;
    switch (charge.outcome) {
      case ledger::ChargeOutcome::counted: break;
      case ledger::ChargeOutcome::exhausted: in.run.calls_used = in.run.budget; break;
      case ledger::ChargeOutcome::frozen: in.run.state = policy::RunState::frozen; break;
      case ledger::ChargeOutcome::killed: in.run.state = policy::RunState::killed; break;
    }
    calls_used_ = charge.calls;
  }

  policy::IntentView view_of(const ledger::Intent& i) {
    policy::IntentView v;
    v.state = view_state(i.state);
    v.key = i.key;
    if (auto c = policy::parse_answer_class(i.answer_class)) v.last_class = *c;
    v.attempts = i.attempts;
    if (i.unknown_since) v.unknown_since = to_sys(*i.unknown_since);
    if (i.retry_not_before) v.retry_not_before = to_sys(*i.retry_not_before);
    return v;
  }

  asio::awaitable<std::optional<bool>> approved(std::int64_t intent_id) {
    std::optional<ledger::EscalationState> state = ledger::EscalationState::approved;
    auto list = co_await ledger_.list_escalations(state, 1000);
    if (!list) co_return std::nullopt;
    for (auto const& e : *list)
      if (e.intent_id && *e.intent_id == intent_id) co_return true;
    co_return false;
  }

  asio::awaitable<std::optional<int>> validation_failures() {
    std::string run = run_;
    std::string tool = tool_.name;
    std::string cls = "validation";
    auto n = co_await ledger_.count_intents(std::move(run), std::move(tool), std::move(cls), intent_.id);
    if (!n) co_return std::nullopt;
    co_return static_cast<int>(*n);
  }


  // ---- carrying out a verdict -----------------------------------------

  asio::awaitable<ForwardResult> carry_out(policy::Verdict verdict) {
    for (int round = 0; round < 4; ++round) {
      switch (verdict.kind) {
        case VerdictKind::replay:
          co_return co_await replay("replayed");
        case VerdictKind::refuse:
          co_return co_await refuse(verdict);
        case VerdictKind::in_flight_409:
          co_return co_await answer_wait(409, "in_flight", "The same call is in flight", verdict);
        case VerdictKind::reject_429:
          co_return co_await answer_wait(429, "retry_after", "Wait before retrying", verdict);
        case VerdictKind::hold: {
          auto const wait = std::chrono::duration_cast<std::chrono::milliseconds>(*verdict.hold_until - SysClock::now());
          held_ = true;
          if (wait.count() > 0) {
            asio::steady_timer timer(co_await asio::this_coro::executor, wait);
            co_await timer.async_wait(use_tuple);
          }
          // The run may have been killed or frozen while we waited.
          std::string run = run_;
          auto now_run = co_await ledger_.find_run(std::move(run));
          if (!now_run) co_return co_await ledger_down();
          if (now_run->state == ledger::RunState::killed) {
            auto v = refusal(policy::ReasonCode::run_killed, "the run was killed while this call waited");
            co_return co_await refuse(v);
          }
          if (now_run->state == ledger::RunState::frozen) {
            auto v = refusal(policy::ReasonCode::run_frozen, "the run was frozen while this call waited");
            co_return co_await refuse(v);
          }
          co_return co_await dispatch(true);
        }
        case VerdictKind::reconcile:
          if (verdict.reconcile_mode == policy::ReconcileMode::query) {
            verdict = co_await reconcile_by_query();
            continue;
          }
          reconciling_ = true;
          co_return co_await dispatch(false);
        case VerdictKind::dispatch:
          co_return co_await dispatch(false);
      }
    }
    co_return co_await refuse(verdict);
  }

  // Begins an attempt (compare-and-set in the ledger) and sends.
  asio::awaitable<ForwardResult> dispatch(bool after_hold) {
    for (int tries = 0;; ++tries) {
      auto start = co_await ledger_.begin_attempt(intent_.id, tool_.retry.bound + 1);
      if (!start) co_return co_await ledger_down();
      intent_ = start->intent;
      switch (start->outcome) {
        case ledger::AttemptOutcome::started:
          attempt_ = start->attempt;
          co_return co_await send();
        case ledger::AttemptOutcome::completed:
          co_return co_await replay("replayed");
        case ledger::AttemptOutcome::in_flight: {
          policy::Verdict v;
          v.retry_after = std::chrono::seconds(1);
          v.detail = "the same call is being dispatched right now";
          co_return co_await answer_wait(409, "in_flight", "The same call is in flight", v);
        }
        case ledger::AttemptOutcome::denied: {
          auto v = refusal(policy::reason_for_denied(view_of(intent_).last_class),
                           "this exact call was already answered " + intent_.answer_class);
          co_return co_await refuse(v);
        }
        case ledger::AttemptOutcome::exhausted: {
          auto v = refusal(policy::ReasonCode::tool_retry_exhausted,
                           "same fingerprint failed as " + intent_.answer_class + " after " +
                               std::to_string(intent_.attempts) + " attempts");
          co_return co_await refuse(v);
        }
        case ledger::AttemptOutcome::not_yet: {
          // The ledger's clock says wait a little longer (hold) or tell the agent.
          auto v = policy::decide(tool_, decision_input(), agent_key_);
          if (v.kind == VerdictKind::hold && tries < 3) {
            auto const wait = std::chrono::duration_cast<std::chrono::milliseconds>(*v.hold_until - SysClock::now());
            asio::steady_timer timer(co_await asio::this_coro::executor, std::max(wait, std::chrono::milliseconds(5)));
            co_await timer.async_wait(use_tuple);
            held_ = true;
            continue;
          }
          if (v.kind == VerdictKind::reject_429 || v.kind == VerdictKind::hold) {
            co_return co_await answer_wait(429, "retry_after", "Wait before retrying", v);
          }
          co_return co_await carry_out(v);
        }
      }
      (void)after_hold;
    }
  }

  policy::DecisionInput decision_input() {
    policy::DecisionInput in;
    in.now = SysClock::now();
    in.intent = view_of(intent_);
    in.agent_key.present = !agent_key_.empty();
    return in;
  }

  asio::awaitable<ForwardResult> send() {
    StringRequest out = upstream_request(req_, target_, body_);
    if (is_write_) out.set(tool_.idempotency.header, intent_.key);
    auto answer = co_await exchange(target_, out, cfg_, worker_, exchange_options());
    auto const now = SysClock::now();
    std::vector<policy::Header> hv;
    if (answer.outcome == policy::TransportOutcome::answered) hv = header_view(answer.response);
    policy::Answer a{answer.outcome, answer.outcome == policy::TransportOutcome::answered ? answer.response.result_int() : 0,
                     hv};
    auto cls = policy::classify(a, tool_, now);
    // The egress guard refused the destination: nothing left the process and
    // a retry cannot help (policy, not transport).
    bool const egress_refused = answer.problem && answer.problem->reason_code == "egress_denied";
    if (egress_refused) cls.answer_class = AnswerClass::policy_deny;
    answer_class_ = std::string(policy::to_string(cls.answer_class));

    if (!is_write_ && egress_refused) {
      auto v = refusal(policy::ReasonCode::egress_denied, answer.problem->detail + "; nothing was sent");
      co_return co_await refuse(v);
    }
    if (!is_write_) co_return co_await finish_read(answer, cls, now);

    // A re-send after an unknown outcome (or after an earlier attempt) that
    // is refused as a conflict or a validation error says nothing about the
    // first send: the provider may be saying "this key is in use" or "this
    // key came with another body". The outcome stays unknown.
    auto effective = cls.answer_class;
    bool const ambiguous_refusal =
        (reconciling_ && !policy::is_retryable(effective) && effective != AnswerClass::ok) ||
        (attempt_ > 1 && (effective == AnswerClass::conflict || effective == AnswerClass::validation));
    if (ambiguous_refusal && answer.outcome == policy::TransportOutcome::answered) {
      effective = AnswerClass::unknown;
      answer_class_ = "unknown";
    }

    ledger::Outcome o;
    o.intent_id = intent_.id;
    o.attempt = attempt_;
    o.state = ledger_state_for(effective);
    o.answer_class = answer_class_;
    if (answer.outcome == policy::TransportOutcome::answered) {
      o.status = answer.response.result_int();
      o.receipt = receipt_from(tool_, answer.response.body());
      // The buffer only: an answer longer than limits.guarded_answer is stored
      // as its first bytes, marked truncated.
      ledger::StoredResponse stored{answer.response.result_int(), headers_of(answer.response), answer.response.body(),
                                    answer.tail != nullptr};
      o.response = std::move(stored);
    }
    if (o.state == ledger::IntentState::retryable) {
      o.retry_after = cls.retry_after ? *cls.retry_after : std::chrono::milliseconds(0);
    }
    // The answer is the world's evidence: recording it is retried (a busy
    // queue is transient) before giving up. If it still fails the agent gets
    // the answer and the intent stays dispatched; recovery marks it unknown.
    std::optional<ledger::Intent> recorded_intent;
    for (int tries = 0; tries < 4; ++tries) {
      ledger::Outcome copy = o;
      auto recorded = co_await ledger_.record_outcome(std::move(copy));
      if (recorded) {
        recorded_intent = *recorded;
        break;
      }
      if (recorded.error() == ledger::errc::illegal_transition) break;
      asio::steady_timer backoff(co_await asio::this_coro::executor, std::chrono::milliseconds(50 << (2 * tries)));
      co_await backoff.async_wait(use_tuple);
    }
    if (recorded_intent) {
      intent_ = *recorded_intent;
    } else {
      log_event("ledger_record_failed", {{"intent", intent_.id}, {"attempt", attempt_}, {"class", answer_class_}});
    }
    if (effective == AnswerClass::validation) worker_.reads().note_validation(run_, tool_.name);

    if (egress_refused) {
      auto v = refusal(policy::ReasonCode::egress_denied, answer.problem->detail + "; nothing was sent");
      co_return co_await refuse(v);
    }
    if (effective == AnswerClass::unknown || answer.outcome != policy::TransportOutcome::answered) {
      if (answer.outcome == policy::TransportOutcome::connect_failed) {
        // Nothing left the process: the agent may retry (same key, bounded).
        decision_ = "forwarded";
        Problem p = *answer.problem;
        co_return co_await answer_problem_with_headers(p, false);
      }
      auto const reason = tool_.effect == policy::Effect::money ? policy::ReasonCode::money_unknown
                                                                : policy::ReasonCode::tool_outcome_unknown;
      auto v = refusal(reason, answer.problem ? answer.problem->detail +
                                                    "; the outcome is unknown and the intent stays reserved under its key"
                                              : "the provider answered " + std::to_string(a.status) +
                                                    " to a write whose key it does not honour; the effect may have happened");
      v.http_status = 504;
      co_return co_await refuse(v);
    }
    if (policy::freezes_run(cls.answer_class)) {
      std::string run = run_;
      std::string why = "tool '" + tool_.name + "' answered " + std::to_string(a.status);
      auto frozen = co_await ledger_.freeze_run(std::move(run), std::move(why));
      if (!frozen) log_event("ledger_freeze_failed", {{"run", run_}, {"error", frozen.error().message()}});
    }
    decision_ = held_ ? "held" : reconciling_ ? "reconciled" : "forwarded";
    StringResponse res = client_response(answer.response.result_int(), headers_of(answer.response),
                                         std::move(answer.response.body()), version_, keep_alive_);
    add_idemgate_headers(res);
    co_return co_await write_response(res, answer.tail.get());
  }

  asio::awaitable<ForwardResult> finish_read(UpstreamAnswer& answer, const policy::Classification& cls,
                                             SysClock::time_point now) {
    std::optional<SysClock::time_point> not_before;
    if (cls.retry_after) not_before = now + *cls.retry_after;
    worker_.reads().record(read_key(), cls.answer_class, not_before);
    decision_ = held_ ? "held" : "forwarded";
    if (answer.outcome != policy::TransportOutcome::answered) {
      Problem p = *answer.problem;
      co_return co_await answer_problem_with_headers(p, false);
    }
    StringResponse res = client_response(answer.response.result_int(), headers_of(answer.response),
                                         std::move(answer.response.body()), version_, keep_alive_);
    add_idemgate_headers(res);
    co_return co_await write_response(res, answer.tail.get());
  }

  // Writes go out on a fresh connection or one whose Keep-Alive timeout is
  // far off, and are sent again after a stale one only when the provider
  // deduplicates on the key; reads may always be sent again.
  ExchangeOptions exchange_options() const {
    ExchangeOptions o;
    o.answer_limit = cfg_.limits.guarded_answer;
    o.reuse = is_write_ ? Reuse::known_alive : Reuse::any;
    o.resend_if_stale = !is_write_ || (tool_.idempotency.honoured && tool_.reconcile.mode == policy::ReconcileMode::same_key);
    return o;
  }

  std::string read_key() const { return run_ + "\n" + tool_.name + "\n" + fp_.hex; }

  asio::awaitable<ForwardResult> run_read() {
    policy::DecisionInput in;
    in.now = SysClock::now();
    in.missing_required = missing_;
    if (!co_await charge_run(in)) co_return co_await ledger_down();
    in.intent = worker_.reads().view(read_key());
    attempt_ = in.intent.attempts + 1;
    auto verdict = policy::decide(tool_, in, {});
    switch (verdict.kind) {
      case VerdictKind::dispatch:
        co_return co_await send();
      case VerdictKind::hold: {
        auto const wait = std::chrono::duration_cast<std::chrono::milliseconds>(*verdict.hold_until - SysClock::now());
        if (wait.count() > 0) {
          asio::steady_timer timer(co_await asio::this_coro::executor, wait);
          co_await timer.async_wait(use_tuple);
        }
        held_ = true;
        co_return co_await send();
      }
      case VerdictKind::reject_429:
        co_return co_await answer_wait(429, "retry_after", "Wait before retrying", verdict);
      default:
        co_return co_await refuse(verdict);
    }
  }

  // reconcile.mode query: ask the provider whether the earlier attempt landed.
  asio::awaitable<policy::Verdict> reconcile_by_query() {
    reconciling_ = true;
    auto const& q = tool_.reconcile.query;
    policy::TemplateValues values{intent_.key, intent_.receipt, fp_.body ? &*fp_.body : nullptr};
    auto const url = policy::expand_url_template(q.url, values);
    auto qt = url ? parse_absolute_target(*url) : std::nullopt;
    policy::QueryOutcome outcome = policy::QueryOutcome::failed;
    std::string found_json;
    if (qt) {
      StringRequest qr{http::string_to_verb(q.method), qt->origin_form, 11};
      qr.set(http::field::host, qt->authority());
      // Asking the provider needs the credentials the agent sent it.
      for (auto const& f : req_) {
        if (f.name() == http::field::authorization || beast::iequals(f.name_string(), "x-api-key"))
          qr.set(f.name_string(), f.value());
      }
      ExchangeOptions lookup;
      lookup.answer_limit = cfg_.limits.guarded_answer;
      lookup.stream_rest = false;
      lookup.resend_if_stale = true;  // a lookup changes nothing
      auto answer = co_await exchange(*qt, qr, cfg_, worker_, lookup);
      if (answer.outcome == policy::TransportOutcome::answered) {
        int const status = answer.response.result_int();
        if (status / 100 == 2 && policy::query_found(q, answer.response.body())) {
          outcome = policy::QueryOutcome::found;
          boost::system::error_code ec;
          auto v = json::parse(answer.response.body(), ec);
          auto const* at = ec ? nullptr : (q.found.empty() ? &v : policy::find_pointer(v, q.found));
          found_json = at ? json::serialize(*at) : answer.response.body();
        } else if (status == 404 || status / 100 == 2) {
          outcome = policy::QueryOutcome::not_found;
        }
      }
    }
    auto const now = SysClock::now();
    auto view = view_of(intent_);
    auto v = policy::after_query(tool_, view, outcome, view.unknown_since, now);
    if (v.kind == VerdictKind::replay) {
      // Record what the provider showed as the completion, then answer with it.
      ledger::Outcome o;
      o.intent_id = intent_.id;
      o.attempt = 0;
      o.state = ledger::IntentState::completed;
      o.answer_class = "ok";
      o.status = 200;
      o.receipt = receipt_from(tool_, found_json);
      ledger::StoredResponse stored{200, {{"Content-Type", "application/json"}}, found_json, false};
      o.response = std::move(stored);
      auto recorded = co_await ledger_.record_outcome(std::move(o));
      if (!recorded) {
        auto down = refusal(policy::ReasonCode::ledger_unavailable, "the ledger could not record the reconciliation");
        co_return down;
      }
      intent_ = *recorded;
      replay_decision_ = "reconciled";
    }
    co_return v;
  }

  // ---- answers ---------------------------------------------------------

  asio::awaitable<ForwardResult> replay(std::string_view decision) {
    decision_ = replay_decision_.empty() ? std::string(decision) : replay_decision_;
    answer_class_ = intent_.answer_class.empty() ? "ok" : intent_.answer_class;
    if (!intent_.response) {
      // Settled by an operator (complete with a receipt): the receipt is
      // the answer.
      json::object done{{"receipt", intent_.receipt}, {"idempotency_key", intent_.key}, {"settled_by", "operator"}};
      ledger::StoredResponse synthetic{200, {{"Content-Type", "application/json"}}, json::serialize(done), false};
      intent_.response = std::move(synthetic);
    }
    auto const& stored = *intent_.response;
    StringResponse res = client_response(stored.status, stored.headers, stored.body, version_, keep_alive_);
    // The stored body was cut at ledger.response_cap: say so, never pass it
    // off as the whole answer.
    if (stored.truncated) res.set("Idemgate-Replay-Truncated", "true");
    if (decision_ == "replayed") res.set("Idempotent-Replayed", "true");
    attempt_ = intent_.attempts;
    add_idemgate_headers(res);
    co_return co_await write_response(res);
  }

  policy::Verdict refusal(policy::ReasonCode reason, std::string detail) {
    policy::Verdict v;
    v.kind = VerdictKind::refuse;
    v.reason = reason;
    v.http_status = policy::http_status_of(reason);
    v.terminal = policy::terminal_of(reason);
    v.detail = std::move(detail);
    return v;
  }

  asio::awaitable<ForwardResult> ledger_down() {
    auto v = refusal(policy::ReasonCode::ledger_unavailable,
                     "the ledger could not be read or written; nothing was sent upstream");
    v.retry_after = std::chrono::seconds(1);
    co_return co_await refuse(v);
  }

  // The escalation package (SPEC section 4), persisted before it is written.
  asio::awaitable<ForwardResult> refuse(const policy::Verdict& v) {
    decision_ = "refused";
    reason_code_ = std::string(policy::to_string(v.reason));
    if (answer_class_.empty())
      answer_class_ = v.reason == policy::ReasonCode::policy_deny || v.reason == policy::ReasonCode::pending_approval
                          ? "policy_deny"
                          : (intent_.answer_class.empty() ? "" : intent_.answer_class);
    Problem p;
    p.status = static_cast<unsigned>(v.http_status ? v.http_status : 403);
    p.reason_code = reason_code_;
    p.title = "Refused: " + reason_code_;
    p.detail = v.detail;
    if (v.retry_after) p.retry_after_s = static_cast<unsigned>(std::max<long>(1, (v.retry_after->count() + 999) / 1000));
    auto& x = p.extra;
    x["terminal"] = policy::to_string(v.terminal);
    x["question_for_human"] = policy::question_for_human(v.reason);
    x["tool"] = tool_.name;
    x["run"] = run_;
    x["fingerprint"] = fp_.hex;
    x["idempotency_key"] = have_intent_ ? json::value(intent_.key) : json::value(nullptr);
    x["attempts"] = have_intent_ ? intent_.attempts : attempt_;
    x["bound"] = tool_.retry.bound;
    x["trace_id"] = trace_id_;
    x["calls_used"] = calls_used_;
    x["budget"] = cfg_.runs.budget;
    if (have_intent_) x["intent"] = intent_.id;
    if (have_intent_ && !intent_.receipt.empty()) x["receipt"] = intent_.receipt;
    if (malformed_) x["body_malformed"] = true;
    bool const ledger_ok = v.reason != policy::ReasonCode::ledger_unavailable;
    json::array tried;
    if (ledger_ok) {
      std::string run = run_;
      auto intents = co_await ledger_.list_intents_by_run(std::move(run), 20);
      if (intents) {
        for (auto const& i : *intents)
          tried.push_back(json::object{{"name", i.tool}, {"fingerprint", i.fingerprint}, {"class", i.answer_class}});
      }
    }
    x["tools_tried"] = std::move(tried);
    if (ledger_ok) {
      ledger::EscalationRequest er;
      er.run = run_;
      if (have_intent_) er.intent_id = intent_.id;
      er.reason_code = reason_code_;
      er.package_json = problem_json(p);
      auto id = co_await ledger_.persist_escalation(std::move(er));
      if (!id) {
        // No package, no refusal: the agent is told to come back later.
        auto down = refusal(policy::ReasonCode::ledger_unavailable,
                            "the escalation package could not be persisted; nothing was sent upstream");
        down.retry_after = std::chrono::seconds(1);
        co_return co_await refuse(down);
      }
      x["escalation_id"] = *id;
      if (have_intent_) {
        std::string reason = reason_code_;
        auto r = co_await ledger_.record_refusal(intent_.id, std::move(reason));
        (void)r;
      }
    }
    co_return co_await answer_problem_with_headers(p, true);
  }

  asio::awaitable<ForwardResult> answer_wait(unsigned status, std::string reason, std::string title,
                                             const policy::Verdict& v) {
    decision_ = "refused";
    reason_code_ = reason;
    Problem p;
    p.status = status;
    p.reason_code = std::move(reason);
    p.title = std::move(title);
    p.detail = v.detail;
    auto const wait = v.retry_after ? *v.retry_after : std::chrono::milliseconds(1000);
    p.retry_after_s = static_cast<unsigned>(std::max<long>(1, (wait.count() + 999) / 1000));
    p.extra["tool"] = tool_.name;
    p.extra["run"] = run_;
    p.extra["fingerprint"] = fp_.hex;
    if (have_intent_) {
      p.extra["idempotency_key"] = intent_.key;
      p.extra["intent"] = intent_.id;
      p.extra["attempts"] = intent_.attempts;
    }
    p.extra["bound"] = tool_.retry.bound;
    p.extra["trace_id"] = trace_id_;
    co_return co_await answer_problem_with_headers(p, false);
  }

  asio::awaitable<ForwardResult> answer_problem_with_headers(const Problem& p, bool refusal) {
    http::fields extra;
    fill_idemgate_headers(extra);
    if (refusal && !tool_.should_retry_header.empty()) extra.set(tool_.should_retry_header, "false");
    worker_.stats().problems.fetch_add(1, std::memory_order_relaxed);
    bool const ok = co_await send_problem(client_, p, version_, keep_alive_, cfg_.timeouts.client_header, &extra);
    if (reason_code_.empty()) reason_code_ = p.reason_code;
    log_decision(p.status);
    co_return ForwardResult{ok && keep_alive_};
  }

  void fill_idemgate_headers(http::fields& f) {
    if (!answer_class_.empty()) f.set("Idemgate-Class", answer_class_);
    f.set("Idemgate-Decision", decision_);
    if (have_intent_ && is_write_) f.set("Idemgate-Key", intent_.key);
    int const shown = attempt_ ? attempt_ : (have_intent_ ? intent_.attempts : 0);
    f.set("Idemgate-Attempt", std::to_string(shown) + "/" + std::to_string(tool_.retry.bound + 1));
    if (have_intent_) f.set("Idemgate-Intent", std::to_string(intent_.id));
    f.set("Idemgate-Tool", tool_.name);
  }

  void add_idemgate_headers(StringResponse& res) {
    http::fields f;
    fill_idemgate_headers(f);
    for (auto const& h : f) res.set(h.name_string(), h.value());
  }

  asio::awaitable<ForwardResult> write_response(StringResponse& res, AnswerTail* tail = nullptr) {
    bool const ok = co_await write_answer(client_, res, tail, cfg_, worker_);
    log_decision(res.result_int());
    co_return ForwardResult{ok && keep_alive_};
  }

  void log_decision(unsigned status) {
    auto const us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_);
    json::object o{{"run", run_},
                   {"tool", tool_.name},
                   {"class", answer_class_},
                   {"decision", decision_},
                   {"key", have_intent_ && is_write_ ? json::value(intent_.key) : json::value(nullptr)},
                   {"attempt", attempt_},
                   {"bound", tool_.retry.bound},
                   {"status", status},
                   {"method", req_.method_string()},
                   {"host", target_.host},
                   {"fingerprint", fp_.hex},
                   {"trace_id", trace_id_},
                   {"latency_ms", us.count() / 1000},
                   {"latency_us", us.count()}};
    if (!reason_code_.empty()) o["reason_code"] = reason_code_;
    if (have_intent_) o["intent"] = intent_.id;
    log_event("decision", std::move(o));
    worker_.decisions().count(tool_.name, decision_, answer_class_, reason_code_);
  }

  ProxyStream& client_;
  beast::flat_buffer& cbuf_;
  http::request_parser<http::buffer_body>& parser_;
  http::request<http::buffer_body>& req_;
  const Target& target_;
  const policy::Tool& tool_;
  const config::Config& cfg_;
  Worker& worker_;
  ledger::Ledger& ledger_;
  bool const is_write_;
  unsigned const version_;
  std::chrono::steady_clock::time_point const start_ = std::chrono::steady_clock::now();

  std::string body_;
  std::string run_;
  std::string trace_id_;
  std::string agent_key_;
  policy::Fingerprint fp_;
  std::vector<std::string> missing_;
  bool malformed_ = false;
  bool keep_alive_ = false;
  ledger::Intent intent_;
  bool have_intent_ = false;
  int attempt_ = 0;
  std::int64_t calls_used_ = 0;
  std::optional<BodyBudget::Reservation> budget_;
  bool held_ = false;
  bool reconciling_ = false;
  std::string decision_ = "forwarded";
  std::string replay_decision_;
  std::string answer_class_;
  std::string reason_code_;
};

}  // namespace

asio::awaitable<ForwardResult> guard_request(ProxyStream& client, beast::flat_buffer& client_buffer,
                                             http::request_parser<http::buffer_body>& parser, const Target& target,
                                             const policy::Tool& tool, const config::Config& cfg, Worker& worker,
                                             std::optional<std::string> body) {
  Guard guard(client, client_buffer, parser, target, tool, cfg, worker);
  co_return co_await guard.run(std::move(body));
}

asio::awaitable<ForwardResult> forward_buffered(ProxyStream& client,
                                                http::request_parser<http::buffer_body>& parser, const Target& target,
                                                std::string body, const config::Config& cfg, Worker& worker) {
  auto& req = parser.get();
  bool const keep_alive = req.keep_alive() && !worker.draining();
  StringRequest out = upstream_request(req, target, std::move(body));
  ExchangeOptions options;
  options.answer_limit = cfg.limits.guarded_answer;
  auto answer = co_await exchange(target, out, cfg, worker, options);
  if (answer.outcome != policy::TransportOutcome::answered) {
    Problem const p = *answer.problem;
    co_await send_problem(client, p, req.version(), false, cfg.timeouts.client_header);
    co_return ForwardResult{false};
  }
  StringResponse res = client_response(answer.response.result_int(), headers_of(answer.response),
                                       std::move(answer.response.body()), req.version(), keep_alive);
  bool const ok = co_await write_answer(client, res, answer.tail.get(), cfg, worker);
  co_return ForwardResult{ok && keep_alive};
}

}  // namespace idemgate::proxy
