// The write path (see write_path.hpp). decide() makes every verdict; this
// file gathers its inputs and carries each one out.
#include "proxy/write_path.hpp"

#include "ledger/ledger.hpp"
#include "policy/decide.hpp"
#include "policy/outcome.hpp"
#include "policy/reason.hpp"
#include "policy/reconcile.hpp"
#include "proxy/answers.hpp"
#include "proxy/dispatch.hpp"
#include "proxy/ids.hpp"
#include "proxy/ledger_room.hpp"
#include "proxy/log.hpp"
#include "proxy/mcp_answer.hpp"
#include "proxy/messages.hpp"
#include "proxy/outcome_recorder.hpp"
#include "proxy/query_reconcile.hpp"
#include "proxy/read_tracker.hpp"
#include "proxy/worker.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using policy::VerdictKind;
using SysClock = std::chrono::system_clock;

namespace {

constexpr auto use_tuple = asio::as_tuple(use_task);
// A request that turns this often without an answer is answered anyway (a
// guard against a loop bug; reconcile.inline ends every real wait first).
constexpr int kMaxTurns = 256;

SysClock::time_point to_sys(const ledger::TimePoint& t) { return SysClock::time_point(t.time_since_epoch()); }

policy::IntentState view_state(ledger::IntentState s) {
  switch (s) {
    case ledger::IntentState::reserved: return policy::IntentState::none;
    case ledger::IntentState::dispatched: return policy::IntentState::in_flight;
    case ledger::IntentState::completed: return policy::IntentState::completed;
    case ledger::IntentState::unknown: return policy::IntentState::unknown;
    case ledger::IntentState::denied: return policy::IntentState::denied;
    case ledger::IntentState::retryable: return policy::IntentState::retryable;
  }
  return policy::IntentState::unavailable;
}

policy::IntentView view_of(const ledger::Intent& i) {
  policy::IntentView v;
  v.state = view_state(i.state);
  v.key = i.key;
  if (auto c = policy::parse_answer_class(i.answer_class)) v.last_class = *c;
  v.attempts = i.attempts_spent();
  if (i.unknown_since) v.unknown_since = to_sys(*i.unknown_since);
  if (i.retry_not_before) v.retry_not_before = to_sys(*i.retry_not_before);
  if (i.lease_until) v.lease_until = to_sys(*i.lease_until);
  return v;
}

ledger::IntentState ledger_state(policy::SettledState s) {
  switch (s) {
    case policy::SettledState::completed: return ledger::IntentState::completed;
    case policy::SettledState::retryable: return ledger::IntentState::retryable;
    case policy::SettledState::unknown: return ledger::IntentState::unknown;
    case policy::SettledState::denied: return ledger::IntentState::denied;
  }
  return ledger::IntentState::unknown;
}

class WritePath {
 public:
  explicit WritePath(Call& call) : c_(call) {}

  Task<ForwardResult> run() {
    in_.missing_required = c_.missing;
    in_.agent_key.present = !c_.agent_key.empty();
    in_.now = SysClock::now();
    // Refusals that depend only on the request and the tool come before any
    // reservation: a refused request must not claim the fingerprint.
    if (c_.tool.policy != policy::PolicyAction::pending_approval) {
      auto pre = policy::decide(c_.tool, in_, c_.agent_key);
      if (pre.kind == VerdictKind::refuse) co_return co_await answer_refusal(c_, pre);
    }
    if (!co_await reserve()) co_return co_await answer_ledger_down(c_);
    if (first_) {
      // The ledger began the first attempt with the reservation.
      std::optional<ForwardResult> answered = co_await send_and_record(*first_);
      if (answered) co_return *answered;
    }
    for (int turn = 0; turn < kMaxTurns; ++turn) {
      auto verdict = co_await gather_and_decide();
      if (!verdict) co_return co_await answer_ledger_down(c_);
      switch (verdict->kind) {
        case VerdictKind::replay:
          if (c_.decision != "reconciled") c_.decision = "replayed";
          co_return co_await answer_replay(c_);
        case VerdictKind::refuse:
          co_return co_await answer_refusal(c_, *verdict);
        case VerdictKind::wait:
          co_return co_await answer_wait(c_, *verdict);
        case VerdictKind::hold:
          if (!co_await hold(*verdict)) co_return co_await answer_ledger_down(c_);
          continue;
        case VerdictKind::reconcile:
          if (verdict->reconcile_mode == policy::ReconcileMode::query) {
            if (!co_await look_up()) co_return co_await answer_ledger_down(c_);
            continue;
          }
          [[fallthrough]];
        case VerdictKind::dispatch: {
          auto start = co_await begin_attempt();
          if (!start) co_return co_await answer_ledger_down(c_);
          if (!*start) continue;  // the intent moved: decide again
          std::optional<ForwardResult> answered = co_await send_and_record(*verdict);
          if (answered) co_return *answered;
          continue;  // still unknown: reconcile
        }
      }
    }
    co_return co_await answer_wait(c_, still_reconciling());
  }

 private:
  // ---- gather ------------------------------------------------------------

  // The run's charge, the reservation and, when a new intent would be
  // dispatched at once, its first attempt: one ledger call, one durable
  // commit (shared with the other requests of its batch) before dispatch.
  Task<bool> reserve() {
    use_agent_key_ = c_.tool.idempotency.mode != policy::KeyMode::inject && !c_.agent_key.empty();
    std::optional<policy::Verdict> fresh_verdict;
    // Built afresh for each try (a busy ledger wrote nothing of the last).
    auto admit = [&] {
      ledger::ReserveRequest rr;
      rr.run = c_.run;
      rr.tool = c_.tool.name;
      rr.scope = c_.tool.fingerprint.scope == policy::FingerprintScope::run ? c_.run : std::string();
      rr.fingerprint = c_.fp.hex;
      rr.key = use_agent_key_ ? c_.agent_key : mint_uuid_v7();
      rr.agent_key = c_.agent_key;
      rr.window = c_.tool.fingerprint.window;
      rr.unknown_ttl = c_.tool.reconcile.ttl;
      ledger::RequestSnapshot snap{std::string(c_.req.method_string()),
                                   c_.target.url(),
                                   headers_of(c_.req), c_.body};
      ledger::AdmitRequest ar{std::move(rr), c_.cfg.runs.budget, std::nullopt};
      fresh_verdict = verdict_if_fresh(ar.reserve.key);
      if (fresh_verdict && fresh_verdict->kind == VerdictKind::dispatch)
        ar.first_attempt = ledger::FirstAttempt{c_.tool.retry.bound + 1, attempt_lease(c_.cfg)};
      return c_.ledger.admit(std::move(ar), std::move(snap));
    };
    auto admitted_box = co_await with_ledger_room(admit);
    auto& admitted = *admitted_box;
    if (!admitted) co_return false;
    apply_charge(c_, admitted->charge, in_);
    auto* reservation = &admitted->reservation;
    bool const fresh = reservation->outcome == ledger::ReserveOutcome::reserved;
    bool const mismatch = reservation->outcome == ledger::ReserveOutcome::key_mismatch;
    if (!fresh && !mismatch && use_agent_key_ && c_.agent_key != reservation->intent.key)
      in_.agent_key.fingerprint_bound_to_other_key = true;
    // A key bound to another payload says nothing about this payload's
    // intent (the row returned is the other one): refuse on the key alone.
    in_.agent_key.bound_to_other_fingerprint = mismatch;
    if (!mismatch) c_.intent = std::move(reservation->intent);
    if (admitted->start) {
      // Begun only for this request's own reservation with a counted charge:
      // exactly the inputs verdict_if_fresh decided from.
      if (admitted->start->outcome == ledger::AttemptOutcome::started) {
        c_.attempt = admitted->start->attempt;
        c_.sent = true;
        first_ = fresh_verdict;
      }
    }
    if (c_.tool.policy == policy::PolicyAction::pending_approval && c_.intent) {
      auto ok = co_await approved(c_.intent->id);
      if (!ok) co_return false;
      approved_ = *ok;
    }
    co_return true;
  }

  // The intent as the ledger holds it now (waiting out a full queue).
  Task<ledger::Result<ledger::Intent>> reread_intent() {
    auto const id = c_.intent->id;
    co_return co_await with_ledger_room([&] { return c_.ledger.find_intent(id); });
  }

  Task<std::optional<bool>> approved(std::int64_t intent_id) {
    std::optional<ledger::EscalationState> state = ledger::EscalationState::approved;
    auto list = co_await with_ledger_room([&] { return c_.ledger.list_escalations(state, 1000); });
    if (!list) co_return std::nullopt;
    for (auto const& e : *list)
      if (e.intent_id && *e.intent_id == intent_id) co_return true;
    co_return false;
  }

  // What decide() says of a new intent with key `key` and a counted charge,
  // before the ledger is asked: nullopt when that cannot be known yet (an
  // approval to look up, a validation count to read).
  std::optional<policy::Verdict> verdict_if_fresh(const std::string& key) {
    if (c_.tool.policy == policy::PolicyAction::pending_approval) return std::nullopt;
    if (c_.worker.reads().validation_seen(c_.run, c_.tool.name)) return std::nullopt;
    policy::DecisionInput in = in_;
    prepare(in);
    ledger::RunCharge counted{ledger::ChargeOutcome::counted, 0, c_.cfg.runs.budget};
    apply_charge(c_, counted, in);
    in.intent = policy::IntentView{};
    in.intent.state = policy::IntentState::none;
    in.intent.key = key;
    in.validation_failures = 0;
    return policy::decide(c_.tool, in, c_.agent_key);
  }

  void prepare(policy::DecisionInput& in) const {
    in.now = SysClock::now();
    auto const inline_end = c_.start + c_.tool.reconcile.inline_budget;
    auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(inline_end - std::chrono::steady_clock::now());
    in.inline_left = std::max(left, std::chrono::milliseconds(0));
    in.rounds = rounds_;
    in.last_round_end = last_round_end_;
  }

  // An outcome of this intent's attempt may still be on its way to the
  // ledger (it is recorded after the answer went out): a settled answer is
  // seen at once; a retryable one is waited for until it is durable (the
  // next attempt's compare-and-set needs it there). false: the ledger failed.
  Task<bool> see_pending_outcome() {
    if (!c_.intent || c_.intent->state != ledger::IntentState::dispatched) co_return true;
    auto pending = pending_outcome(c_.ledger, c_.intent->id, c_.intent->attempts);
    if (!pending) {
      // In flight, or its outcome landed (and left the table) after the
      // ledger was read: outcomes have a writer of their own, so that read
      // may predate it. Read again; what landed is there now.
      auto now = co_await reread_intent();
      if (!now) co_return false;
      c_.intent = std::move(*now);
      co_return true;
    }
    if (pending->state != ledger::IntentState::retryable) {
      c_.intent = std::move(*pending);
      co_return true;
    }
    if (!co_await outcome_landed(c_.ledger, c_.intent->id, c_.intent->attempts, c_.cfg.ledger.statement_timeout))
      co_return true;  // still not durable: the ledger's state (in flight) stands
    auto now = co_await reread_intent();
    if (!now) co_return false;
    c_.intent = std::move(*now);
    co_return true;
  }

  // nullopt: the ledger failed.
  Task<std::optional<policy::Verdict>> gather_and_decide() {
    if (!co_await see_pending_outcome()) co_return std::nullopt;
    prepare(in_);
    in_.query = query_;
    query_.reset();  // one lookup feeds one decision
    if (c_.intent) {
      in_.intent = view_of(*c_.intent);
      in_.intent.approved = approved_;
    }
    in_.validation_failures = 0;
    if (c_.intent && c_.intent->state == ledger::IntentState::reserved &&
        c_.worker.reads().validation_seen(c_.run, c_.tool.name)) {
      // Validation is retried once with a corrected payload, never twice.
      // The count includes validation answers given but not durable yet.
      std::string run = c_.run, tool = c_.tool.name, cls = "validation";
      co_await run_outcomes_landed(c_.ledger, run, tool, cls, c_.cfg.ledger.statement_timeout);
      auto const except = c_.intent->id;
      auto n = co_await with_ledger_room([&] { return c_.ledger.count_intents(run, tool, cls, except); });
      if (!n) co_return std::nullopt;
      in_.validation_failures = static_cast<int>(*n);
    }
    co_return policy::decide(c_.tool, in_, c_.agent_key);
  }

  // Waits until the verdict's time, then reads the intent and the run again
  // (the run may have been killed or frozen meanwhile).
  Task<bool> hold(const policy::Verdict& v) {
    auto const wait = std::chrono::duration_cast<std::chrono::milliseconds>(*v.hold_until - SysClock::now());
    if (wait.count() > 0) {
      SteadyTimer timer(co_await asio::this_coro::executor, wait);
      co_await timer.async_wait(use_tuple);
    }
    if (c_.intent && c_.intent->state == ledger::IntentState::retryable && !reconciled_) c_.decision = "held";
    if (c_.intent && c_.intent->state == ledger::IntentState::dispatched) ++rounds_;
    last_round_end_ = last_round_end_ ? last_round_end_ : std::optional(SysClock::now());
    auto const id = c_.intent->id;
    auto run_op = with_ledger_room([&] { return c_.ledger.find_run(c_.run); });
    auto intent_op = with_ledger_room([&] { return c_.ledger.find_intent(id); });
    auto [now_run, intent] = co_await (std::move(run_op) && std::move(intent_op));
    if (!now_run || !intent) co_return false;
    c_.intent = std::move(*intent);
    if (now_run->state == ledger::RunState::killed) in_.run.state = policy::RunState::killed;
    if (now_run->state == ledger::RunState::frozen) in_.run.state = policy::RunState::frozen;
    co_return true;
  }

  // ---- reconcile by query ------------------------------------------------

  Task<bool> look_up() {
    mark_reconciling();
    auto result = co_await ask_provider(c_);
    ++rounds_;
    last_round_end_ = SysClock::now();
    if (result.outcome != policy::QueryOutcome::found) {
      query_ = result.outcome;
      co_return true;
    }
    // What the provider shows is the completion: recorded, then replayed.
    // Named locals only: GCC 12 destroys temporaries of a co_await expression twice.
    auto settled = found_outcome(c_.tool, c_.intent->id, result.found_json);
    auto recorded = co_await with_ledger_room([&] { return c_.ledger.record_outcome(settled); });
    if (recorded) {
      c_.intent = std::move(*recorded);
      co_return true;
    }
    // Someone else settled it meanwhile (illegal_transition): read it again.
    auto now = co_await reread_intent();
    if (!now) co_return false;
    c_.intent = std::move(*now);
    co_return true;
  }

  // ---- attempt -----------------------------------------------------------

  // true: started; false: the intent moved (decide again); nullopt: ledger failed.
  Task<std::optional<bool>> begin_attempt() {
    ledger::AttemptRequest r{c_.intent->id, c_.intent->state, c_.intent->attempts, c_.tool.retry.bound + 1,
                             attempt_lease(c_.cfg)};
    auto start = co_await with_ledger_room([&] { return c_.ledger.begin_attempt(r); });
    if (!start) co_return std::nullopt;
    from_unknown_ = c_.intent->state == ledger::IntentState::unknown;
    c_.intent = std::move(start->intent);
    if (start->outcome != ledger::AttemptOutcome::started) co_return false;
    c_.attempt = start->attempt;
    c_.sent = true;
    co_return true;
  }

  void mark_reconciling() {
    reconciled_ = true;
    c_.decision = "reconciled";
  }

  // Sends the attempt begun and records what came back. An answer to give
  // the agent, or nullopt when the outcome is still unknown (or a re-send
  // while reconciling was told "not now") and the loop goes on.
  Task<std::optional<ForwardResult>> send_and_record(const policy::Verdict& verdict) {
    bool const reconciling = from_unknown_ || reconciled_ || verdict.kind == VerdictKind::reconcile;
    if (reconciling) mark_reconciling();
    Sent s = co_await send_upstream(c_, c_.intent->key);
    bool const answered = s.answer.outcome == policy::TransportOutcome::answered;
    auto settled = policy::settle_attempt(s.cls.answer_class, {c_.attempt, reconciling, answered});
    if (s.egress_refused) settled = {policy::AnswerClass::policy_deny, policy::SettledState::denied, false};
    // Nothing left the process on a connect failure: the attempt is retryable.
    c_.answer_class = std::string(policy::to_string(settled.answer_class));

    ledger::Outcome o;
    o.intent_id = c_.intent->id;
    o.attempt = c_.attempt;
    o.state = ledger_state(settled.state);
    o.answer_class = c_.answer_class;
    o.waive = settled.waive;
    if (answered) {
      o.status = s.answer.response.result_int();
      o.receipt = policy::receipt_of(c_.tool, s.answer.response.body()).value_or(std::string());
      // The buffer only: an answer longer than limits.guarded_answer is
      // stored as its first bytes, marked truncated.
      auto const status = static_cast<int>(s.answer.response.result_int());
      o.response = ledger::StoredResponse{status, stored_answer_headers(s.answer.response), s.answer.response.body(),
                                          s.answer.tail != nullptr};
      // A session id is the first requester's: never stored for another
      // (whether or not the tool names an MCP tool).
      std::erase_if(o.response->headers, [](const auto& h) { return is_mcp_session_header(h.first); });
    }
    if (o.state == ledger::IntentState::retryable || (o.state == ledger::IntentState::unknown && settled.waive))
      o.retry_after = s.cls.retry_after ? *s.cls.retry_after : std::chrono::milliseconds(0);
    auto const lease_end = c_.intent->lease_until.value_or(
        std::chrono::time_point_cast<ledger::Millis>(ledger::Clock::now() + attempt_lease(c_.cfg)));
    // An answer that ends this request (settled, or retryable by the
    // provider's word) goes to the agent now and its outcome to the ledger
    // right after. Recorded first: an unknown or an unsent attempt (the
    // request goes on from what the ledger holds), and an answer that
    // freezes the run (the agent's next call must find it frozen).
    bool const freezes = settled.state == policy::SettledState::denied && policy::freezes_run(settled.answer_class);
    bool const after_answer =
        answered && !s.egress_refused && !freezes && settled.state != policy::SettledState::unknown;
    // Whether the ledger took the outcome (c_.intent is then the intent as
    // the outcome leaves it).
    bool recorded = true;
    if (after_answer) {
      auto executor = co_await asio::this_coro::executor;
      c_.intent = record_after_answer(executor, c_.ledger, std::move(o), lease_end, std::move(*c_.intent));
    } else {
      auto settled_intent = co_await record_outcome(c_.ledger, std::move(o), lease_end);
      if (settled_intent) c_.intent = std::move(*settled_intent);
      recorded = settled_intent.has_value();
    }
    if (settled.answer_class == policy::AnswerClass::validation) c_.worker.reads().note_validation(c_.run, c_.tool.name);
    ++rounds_;
    last_round_end_ = SysClock::now();

    if (s.egress_refused) {
      c_.sent = false;  // the guard refused the address before anything left
      co_return co_await answer_refusal(c_, refusal(policy::ReasonCode::egress_denied,
                                                    s.answer.problem->detail + "; nothing was sent"));
    }
    if (!recorded) {
      // The ledger did not take the outcome (it keeps being recorded in the
      // background). The agent still gets the truth: the provider's answer
      // when there is one, else "unknown, being reconciled".
      if (answered && settled.state != policy::SettledState::unknown) co_return co_await answer_upstream(c_, s.answer);
      co_return co_await answer_ledger_down(c_);
    }
    switch (settled.state) {
      case policy::SettledState::unknown:
        co_return std::nullopt;
      case policy::SettledState::retryable:
        if (!answered) {
          // Connect failure: nothing left the process; the agent may retry.
          c_.sent = false;
          co_return co_await answer_problem(c_, *s.answer.problem);
        }
        break;
      case policy::SettledState::denied:
        if (freezes) {
          std::string run = c_.run;
          std::string why = "tool '" + c_.tool.name + "' answered " + std::to_string(s.answer.response.result_int());
          auto frozen = co_await with_ledger_room([&] { return c_.ledger.freeze_run(run, why); });
          if (!frozen) log_event("ledger_freeze_failed", {{"run", c_.run}, {"error", frozen.error().message()}});
        }
        break;
      case policy::SettledState::completed:
        break;
    }
    co_return co_await answer_upstream(c_, s.answer);
  }

  policy::Verdict still_reconciling() const {
    policy::Verdict v;
    v.kind = VerdictKind::wait;
    v.wait_reason = policy::WaitReason::reconciling;
    v.http_status = 409;
    v.retry_after = std::chrono::seconds(1);
    v.detail = "the outcome is not settled yet; idemgate reconciles it before anything is re-sent";
    return v;
  }

  Call& c_;
  policy::DecisionInput in_;
  bool use_agent_key_ = false;
  bool approved_ = false;
  bool from_unknown_ = false;   // the attempt begun re-sends an unknown's key
  bool reconciled_ = false;     // this request reconciled (re-sent or looked up)
  int rounds_ = 0;
  std::optional<SysClock::time_point> last_round_end_;
  std::optional<policy::QueryOutcome> query_;
  std::optional<policy::Verdict> first_;  // the first attempt was begun with the reservation
};

}  // namespace

Task<ForwardResult> run_write_path(Call& call) {
  WritePath path(call);
  co_return co_await path.run();
}

}  // namespace idemgate::proxy
