// PgStore's escalations for the operator (see store.hpp), and what the
// dashboards read: refusals of repeats and the signals views.
#include "ledger/pg_store.hpp"

#include "ledger/pg_support.hpp"
#include "ledger/transitions.hpp"

namespace idemgate::ledger {

namespace {

Escalation load_escalation(pqxx::transaction_base& w, std::int64_t id) {
  auto rows = w.exec("SELECT " + std::string(escalation_columns) +
                     " FROM escalations WHERE id = " + std::to_string(id));
  if (rows.empty()) throw Abort{errc::not_found};
  return read_escalation(PgRow(rows[0]));
}

}  // namespace

Result<std::int64_t> PgStore::persist_escalation(const EscalationRequest& r) {
  return transact([&](pqxx::transaction_base& w) {
    return w
        .exec("INSERT INTO escalations (run_id, intent_id, reason_code, package) VALUES (" +
              q(w, r.run) + ", " + q(w, r.intent_id) + ", " + q(w, r.reason_code) + ", " +
              q(w, r.package_json) +
              ") ON CONFLICT (intent_id, reason_code) WHERE state = 'open' AND intent_id IS NOT NULL "
              "DO UPDATE SET package = EXCLUDED.package RETURNING id")[0][0]
        .as<std::int64_t>();
  });
}

Result<Escalation> PgStore::find_escalation(std::int64_t id) {
  return transact([&](pqxx::transaction_base& w) { return load_escalation(w, id); });
}

Result<std::vector<Escalation>> PgStore::list_escalations(std::optional<EscalationState> state,
                                                          int limit) {
  return transact([&](pqxx::transaction_base& w) {
    std::string where = state ? " WHERE state = " + q(w, to_string(*state)) : "";
    std::vector<Escalation> out;
    for (const auto& row : w.exec("SELECT " + std::string(escalation_columns) +
                                  " FROM escalations" + where + " ORDER BY id DESC LIMIT " +
                                  std::to_string(limit)))
      out.push_back(read_escalation(PgRow(row)));
    return out;
  });
}

Result<Escalation> PgStore::resolve_escalation(const ResolveRequest& r) {
  return transact([&](pqxx::transaction_base& w) {
    auto target = r.resolution == Resolution::approve  ? EscalationState::approved
                  : r.resolution == Resolution::deny   ? EscalationState::denied
                                                       : EscalationState::completed;
    auto changed = w.exec("UPDATE escalations SET state = " + q(w, to_string(target)) +
                          ", receipt = " + q(w, r.receipt) + ", note = " + q(w, r.note) +
                          ", resolved_at = now(), resolved_by = 'operator' WHERE id = " +
                          std::to_string(r.escalation_id) + " AND state = 'open'")
                       .affected_rows();
    auto escalation = load_escalation(w, r.escalation_id);
    if (changed == 0) throw Abort{errc::illegal_transition};
    if (escalation.intent_id && r.resolution != Resolution::approve) {
      bool complete = r.resolution == Resolution::complete;
      std::string receipt = r.receipt.empty() ? "" : ", receipt = " + q(w, r.receipt);
      auto settled =
          w.exec(keep_first_attempts(std::to_string(*escalation.intent_id)) + "UPDATE intents SET state = " +
                 q(w, to_string(complete ? IntentState::completed : IntentState::denied)) +
                 receipt + ", unknown_since = NULL, updated_at = now() WHERE id = " +
                 std::to_string(*escalation.intent_id) + " AND " +
                 sql_state_guard(resolution_sources(r.resolution)))
              .affected_rows();
      if (settled == 0) throw Abort{errc::illegal_transition};
    }
    return escalation;
  });
}

Result<void> PgStore::record_refusal(std::int64_t intent_id, const std::string& reason_code) {
  return transact([&](pqxx::transaction_base& w) {
    auto inserted = w.exec("INSERT INTO refusals (intent_id, run_id, tool, fingerprint, "
                           "reason_code) SELECT id, run_id, tool, fingerprint, " +
                           q(w, reason_code) + " FROM intents WHERE id = " +
                           std::to_string(intent_id))
                        .affected_rows();
    if (inserted == 0) throw Abort{errc::not_found};
  });
}

Result<Signals> PgStore::read_signals(TimePoint since) {
  return transact([&](pqxx::transaction_base& w) {
    auto const from = "to_timestamp(" + std::to_string(since.time_since_epoch().count()) + " / 1000.0)";
    auto const hour = std::string("to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:00:00\"Z\"')");
    Signals out;
    for (const auto& r : w.exec("SELECT reason_code, count(*) FROM escalations WHERE state = 'open' "
                                "GROUP BY reason_code ORDER BY reason_code"))
      out.open_escalations.push_back({r[0].as<std::string>(), r[1].as<std::int64_t>()});
    for (const auto& r : w.exec("SELECT " + hour + ", reason_code, escalations FROM "
                                "dash_escalations_by_reason_hourly WHERE hour >= date_trunc('hour', " + from +
                                ") ORDER BY hour, reason_code"))
      out.escalations_by_hour.push_back({r[0].as<std::string>(), r[1].as<std::string>(), r[2].as<std::int64_t>()});
    for (const auto& r : w.exec("SELECT tool, depth, intents FROM dash_retry_depth ORDER BY tool, depth"))
      out.retry_depth.push_back({r[0].as<std::string>(), r[1].as<int>(), r[2].as<std::int64_t>()});
    for (const auto& r : w.exec("SELECT " + hour + ", tool, reason_code, refusals, fingerprints FROM "
                                "dash_same_fingerprint_refusals WHERE hour >= date_trunc('hour', " + from +
                                ") ORDER BY hour, tool, reason_code"))
      out.refusals_by_hour.push_back({r[0].as<std::string>(), r[1].as<std::string>(), r[2].as<std::string>(),
                                      r[3].as<std::int64_t>(), r[4].as<std::int64_t>()});
    out.unknown_past_ttl = w.exec1("SELECT count(*) FROM dash_unknown_past_ttl")[0].as<std::int64_t>();
    out.duplicate_receipts = w.exec1("SELECT count(*) FROM dash_duplicate_receipts")[0].as<std::int64_t>();
    return out;
  });
}

}  // namespace idemgate::ledger
