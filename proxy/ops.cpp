// The operator's operations (see ops.hpp).
#include "proxy/ops.hpp"

#include "ledger/ledger.hpp"
#include "proxy/outcome_recorder.hpp"
#include "ledger/executor.hpp"

#include <boost/json.hpp>

#include <charconv>

namespace idemgate::proxy::ops {

namespace json = boost::json;

namespace {

std::int64_t millis(const ledger::TimePoint& t) { return t.time_since_epoch().count(); }

OpResult failure(unsigned status, std::string reason, std::string detail) {
  OpResult r;
  r.status = status;
  r.reason_code = std::move(reason);
  r.detail = std::move(detail);
  return r;
}

OpResult from_error(const boost::system::error_code& ec, std::string_view what) {
  if (ec == ledger::errc::not_found) return failure(404, "not_found", std::string(what) + " not found");
  if (ec == ledger::errc::illegal_transition)
    return failure(409, "illegal_transition", std::string(what) + " is not in a state that allows this: " + ec.message());
  return failure(503, "ledger_unavailable", "the ledger could not be read or written: " + ec.message());
}

template <class T>
OpResult answer(const ledger::Result<T>& r, std::string_view what) {
  if (!r) return from_error(r.error(), what);
  OpResult out;
  if constexpr (requires { r->begin(); }) {
    json::array items;
    for (auto const& item : *r) items.push_back(to_json(item));
    out.body = std::move(items);
  } else {
    out.body = to_json(*r);
  }
  return out;
}

}  // namespace

json::object to_json(const ledger::Intent& i) {
  json::object o{{"id", i.id},
                 {"run", i.run},
                 {"tool", i.tool},
                 {"fingerprint", i.fingerprint},
                 {"key", i.key},
                 {"state", ledger::to_string(i.state)},
                 {"class", i.answer_class},
                 {"attempts", i.attempts},
                 {"waived", i.waived},
                 {"receipt", i.receipt},
                 {"recovered", i.recovered},
                 {"created_at_ms", millis(i.created_at)},
                 {"updated_at_ms", millis(i.updated_at)}};
  if (i.status) o["status"] = *i.status;
  if (i.unknown_since) o["unknown_since_ms"] = millis(*i.unknown_since);
  if (i.unknown_ttl.count() > 0) o["unknown_ttl_ms"] = i.unknown_ttl.count();
  return o;
}

json::object to_json(const ledger::Escalation& e) {
  boost::system::error_code ec;
  auto package = json::parse(e.package_json, ec);
  json::object o{{"id", e.id},
                 {"run", e.run},
                 {"reason_code", e.reason_code},
                 {"state", ledger::to_string(e.state)},
                 {"receipt", e.receipt},
                 {"note", e.note},
                 {"resolved_by", e.resolved_by},
                 {"created_at_ms", millis(e.created_at)},
                 {"package", ec ? json::value(e.package_json) : package}};
  if (e.intent_id) o["intent_id"] = *e.intent_id;
  if (e.resolved_at) o["resolved_at_ms"] = millis(*e.resolved_at);
  return o;
}

json::object to_json(const ledger::Run& r) {
  return {{"run", r.id}, {"state", ledger::to_string(r.state)}, {"calls", r.calls}, {"budget", r.budget},
          {"reason", r.reason}};
}

std::optional<std::int64_t> parse_id(std::string_view s) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || p != s.data() + s.size() || v <= 0) return std::nullopt;
  return v;
}

Task<OpResult> list_escalations(ledger::Ledger& ledger, std::string state, int limit) {
  std::optional<ledger::EscalationState> only;
  bool const resolved = state == "resolved";
  if (!state.empty() && !resolved) {
    only = ledger::parse_escalation_state(state);
    if (!only)
      co_return failure(400, "invalid_argument",
                        "unknown state '" + state + "': open, approved, denied, completed or resolved");
  }
  auto list = co_await ledger.list_escalations(only, limit);
  if (list && resolved)
    std::erase_if(*list, [](const ledger::Escalation& e) { return e.state == ledger::EscalationState::open; });
  co_return answer(list, "escalations");
}

Task<OpResult> show_escalation(ledger::Ledger& ledger, std::int64_t id) {
  auto e = co_await ledger.find_escalation(id);
  co_return answer(e, "escalation " + std::to_string(id));
}

Task<OpResult> resolve_escalation(ledger::Ledger& ledger, std::int64_t id, std::string action,
                                                    std::string receipt, std::string note) {
  ledger::ResolveRequest rr;
  rr.escalation_id = id;
  if (action == "approve") rr.resolution = ledger::Resolution::approve;
  else if (action == "deny") rr.resolution = ledger::Resolution::deny;
  else if (action == "complete") rr.resolution = ledger::Resolution::complete;
  else co_return failure(400, "invalid_argument", "action must be approve, deny or complete, got '" + action + "'");
  if (rr.resolution == ledger::Resolution::complete && receipt.empty())
    co_return failure(400, "invalid_argument", "complete needs a receipt (the provider's id for the effect)");
  rr.receipt = std::move(receipt);
  rr.note = std::move(note);
  auto e = co_await ledger.resolve_escalation(std::move(rr));
  co_return answer(e, "open escalation " + std::to_string(id));
}

// Outcomes this process answered but has not made durable yet are shown as
// they will be (the admin API runs in the process that answered).
Task<OpResult> show_intent(ledger::Ledger& ledger, std::int64_t id) {
  auto i = co_await ledger.find_intent(id);
  if (i) show_pending_outcome(ledger, *i);
  co_return answer(i, "intent " + std::to_string(id));
}

Task<OpResult> find_intent_by_key(ledger::Ledger& ledger, std::string key) {
  auto i = co_await ledger.find_intent_by_key(std::move(key));
  if (i) show_pending_outcome(ledger, *i);
  co_return answer(i, "an intent with that key");
}

Task<OpResult> list_intents(ledger::Ledger& ledger, std::string run, int limit) {
  auto list = co_await ledger.list_intents_by_run(std::move(run), limit);
  if (list)
    for (auto& i : *list) show_pending_outcome(ledger, i);
  co_return answer(list, "intents");
}

Task<OpResult> run_action(ledger::Ledger& ledger, std::string run, std::string action,
                                            std::string reason) {
  if (reason.empty()) reason = "by operator";
  std::string const what = "run '" + run + "'";
  if (action == "show") {
    auto r = co_await ledger.find_run(std::move(run));
    co_return answer(r, what);
  }
  if (action == "kill") {
    auto r = co_await ledger.kill_run(std::move(run), std::move(reason));
    co_return answer(r, what);
  }
  if (action == "unfreeze") {
    auto r = co_await ledger.unfreeze_run(std::move(run));
    co_return answer(r, what);
  }
  co_return failure(400, "invalid_argument", "run action must be show, kill or unfreeze, got '" + action + "'");
}

}  // namespace idemgate::proxy::ops
