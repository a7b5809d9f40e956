// Shared helpers of the Store backends (see store_support.hpp).
#include "ledger/store_support.hpp"

#include <boost/json.hpp>


namespace idemgate::ledger::detail {

std::string encode_headers(const Headers& headers) {
  // Written directly (one per recorded answer): what serialising a document
  // of [name, value] arrays would give.
  std::string out;
  out.reserve(headers_json_size(headers));
  append_headers_json(out, headers, [](std::string_view) { return false; });
  return out;
}

Headers decode_headers(std::string_view json) {
  Headers out;
  boost::system::error_code ec;
  auto doc = boost::json::parse(json, ec);
  if (ec || !doc.is_array()) return out;
  for (const auto& pair : doc.as_array()) {
    const auto* a = pair.if_array();
    if (!a || a->size() != 2 || !(*a)[0].is_string() || !(*a)[1].is_string()) continue;
    out.emplace_back(std::string((*a)[0].get_string()), std::string((*a)[1].get_string()));
  }
  return out;
}

Intent read_intent(const RowView& s) {
  Intent i;
  i.id = s.int64(0);
  i.run = s.text(1);
  i.tool = s.text(2);
  i.scope = s.text(3);
  i.fingerprint = s.text(4);
  i.key = s.text(5);
  i.state = parse_intent_state(s.text(6)).value_or(IntentState::unknown);
  i.answer_class = s.text(7);
  i.attempts = static_cast<int>(s.int64(8));
  if (auto v = s.optional_int64(9)) i.status = static_cast<int>(*v);
  i.receipt = s.text(10);
  if (auto v = s.optional_int64(11))
    i.response = StoredResponse{static_cast<int>(*v), decode_headers(s.text(12)), s.blob(13),
                                s.int64(14) != 0};
  i.request_snapshot = s.text(15);
  i.window = Millis(s.int64(16));
  i.unknown_ttl = Millis(s.int64(17));
  i.recovered = s.int64(18) != 0;
  i.created_at = from_epoch_ms(s.int64(19));
  i.updated_at = from_epoch_ms(s.int64(20));
  i.window_until = from_epoch_ms(s.int64(21));
  if (auto v = s.optional_int64(22)) i.unknown_since = from_epoch_ms(*v);
  if (auto v = s.optional_int64(23)) i.retry_not_before = from_epoch_ms(*v);
  if (auto v = s.optional_int64(24)) i.lease_until = from_epoch_ms(*v);
  i.waived = static_cast<int>(s.int64(25));
  if (auto v = s.optional_int64(26)) i.looked_up_at = from_epoch_ms(*v);
  return i;
}

Escalation read_escalation(const RowView& s) {
  Escalation e;
  e.id = s.int64(0);
  e.run = s.text(1);
  e.intent_id = s.optional_int64(2);
  e.reason_code = s.text(3);
  e.package_json = s.text(4);
  e.state = parse_escalation_state(s.text(5)).value_or(EscalationState::open);
  e.receipt = s.text(6);
  e.note = s.text(7);
  e.created_at = from_epoch_ms(s.int64(8));
  if (auto v = s.optional_int64(9)) e.resolved_at = from_epoch_ms(*v);
  e.resolved_by = s.text(10);
  return e;
}

AttemptOutcome refusal_reason(const Intent& intent, const AttemptRequest& request) {
  if (intent.state != request.expected_state || intent.attempts != request.expected_attempts)
    return AttemptOutcome::changed;
  switch (intent.state) {
    case IntentState::dispatched: return AttemptOutcome::in_flight;
    case IntentState::completed: return AttemptOutcome::completed;
    case IntentState::denied: return AttemptOutcome::denied;
    default: break;
  }
  if (intent.attempts_spent() >= request.max_attempts) return AttemptOutcome::exhausted;
  return AttemptOutcome::not_yet;  // the only guard left is retry_not_before
}

bool run_transition_allowed(RunState from, RunState to) {
  if (from == RunState::killed) return to == RunState::killed;
  return true;
}

ChargeOutcome charge_refusal(const Run& run, CallKind kind) {
  if (run.state == RunState::killed) return ChargeOutcome::killed;
  if (run.state == RunState::frozen && kind == CallKind::write) return ChargeOutcome::frozen;
  return ChargeOutcome::exhausted;
}

bool valid(const ReserveRequest& r) {
  return !r.run.empty() && !r.tool.empty() && !r.fingerprint.empty() && !r.key.empty() &&
         r.window.count() >= 0 && r.unknown_ttl.count() >= 0;
}

}  // namespace idemgate::ledger::detail
