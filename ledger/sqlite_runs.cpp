// The SQLite backend's runs, escalations, refusals and the dashboard's
// signals (see sqlite_store.hpp).
#include "ledger/sqlite_store.hpp"

#include "ledger/sqlite_support.hpp"
#include "ledger/transitions.hpp"

#include <algorithm>

namespace idemgate::ledger {

std::optional<Run> SqliteStore::load_run(const std::string& run) {
  Statement s(db_, "SELECT run_id, state, calls, budget, reason FROM runs WHERE run_id = ?");
  s.bind(1, run);
  if (!s.step()) return std::nullopt;
  return Run{s.text(0), parse_run_state(s.text(1)).value_or(RunState::killed), s.int64(2),
             s.int64(3), s.text(4)};
}

Result<RunCharge> SqliteStore::count_call(const std::string& run, std::int64_t budget,
                                          CallKind kind) {
  return transact(Lock::write, [&] {
    auto now = now_epoch_ms();
    Statement(db_, "INSERT INTO runs (run_id, budget, created_at, updated_at) VALUES (?, ?, ?, ?) "
                   "ON CONFLICT (run_id) DO NOTHING")
        .bind(1, run)
        .bind(2, budget)
        .bind(3, now)
        .bind(4, now)
        .run();
    int counted = Statement(db_, "UPDATE runs SET calls = calls + 1, updated_at = ? "
                                 "WHERE run_id = ? AND calls < budget AND "
                                 "(state = 'active' OR (state = 'frozen' AND ? = 0))")
                      .bind(1, now)
                      .bind(2, run)
                      .bind(3, std::int64_t{kind == CallKind::write})
                      .run();
    auto current = *load_run(run);
    return RunCharge{counted ? ChargeOutcome::counted : charge_refusal(current, kind),
                     current.calls, current.budget};
  });
}

Result<Run> SqliteStore::find_run(const std::string& run) {
  return transact(Lock::read, [&] {
    auto found = load_run(run);
    if (!found) throw Abort{errc::not_found};
    return *found;
  });
}

Result<Run> SqliteStore::set_run_state(const std::string& run, RunState state,
                                       const std::string& reason) {
  return transact(Lock::write, [&] {
    auto current = load_run(run);
    if (!current) throw Abort{errc::not_found};
    if (!run_transition_allowed(current->state, state)) throw Abort{errc::illegal_transition};
    // The guard repeats the rule in SQL: a killed run never comes back.
    Statement(db_, "UPDATE runs SET state = ?, reason = ?, updated_at = ? "
                   "WHERE run_id = ? AND (state <> 'killed' OR ? = 'killed')")
        .bind(1, to_string(state))
        .bind(2, reason)
        .bind(3, now_epoch_ms())
        .bind(4, run)
        .bind(5, to_string(state))
        .run();
    return *load_run(run);
  });
}

Result<std::int64_t> SqliteStore::persist_escalation(const EscalationRequest& r) {
  return transact(Lock::write, [&] {
    Statement s(db_, "INSERT INTO escalations (run_id, intent_id, reason_code, package, created_at) "
                     "VALUES (?, ?, ?, ?, ?) ON CONFLICT (intent_id, reason_code) "
                     "WHERE state = 'open' AND intent_id IS NOT NULL "
                     "DO UPDATE SET package = excluded.package RETURNING id");
    s.bind(1, r.run).bind(2, r.intent_id).bind(3, r.reason_code).bind(4, r.package_json);
    s.bind(5, now_epoch_ms());
    s.step();
    auto id = s.int64(0);
    s.run();
    return id;
  });
}

void SqliteStore::settle_unknown_escalations(std::int64_t intent_id, const std::string& answer_class,
                                             const std::string& receipt, std::int64_t now) {
  Statement(db_, "UPDATE escalations SET state = 'completed', resolved_by = 'idemgate', receipt = ?1, "
                 "note = 'settled by reconciliation: ' || ?2, resolved_at = ?3 WHERE intent_id = ?4 "
                 "AND state = 'open' AND reason_code IN ('money_unknown', 'tool_outcome_unknown')")
      .bind(1, receipt)
      .bind(2, answer_class)
      .bind(3, now)
      .bind(4, intent_id)
      .run();
}

Escalation SqliteStore::load_escalation(std::int64_t id) {
  Statement s(db_, sql("SELECT ", escalation_columns, " FROM escalations WHERE id = ?"));
  s.bind(1, id);
  if (!s.step()) throw Abort{errc::not_found};
  return read_escalation(s);
}

Result<Escalation> SqliteStore::find_escalation(std::int64_t id) {
  return transact(Lock::read, [&] { return load_escalation(id); });
}

Result<std::vector<Escalation>> SqliteStore::list_escalations(std::optional<EscalationState> state,
                                                              int limit) {
  return transact(Lock::read, [&] {
    Statement s(db_, sql("SELECT ", escalation_columns,
                         " FROM escalations WHERE (?1 = '' OR state = ?1) ORDER BY id DESC LIMIT ?2"));
    s.bind(1, state ? to_string(*state) : std::string_view{}).bind(2, std::int64_t{limit});
    std::vector<Escalation> out;
    while (s.step()) out.push_back(read_escalation(s));
    return out;
  });
}

Result<Escalation> SqliteStore::resolve_escalation(const ResolveRequest& r) {
  return transact(Lock::write, [&] {
    auto now = now_epoch_ms();
    auto target = r.resolution == Resolution::approve  ? EscalationState::approved
                  : r.resolution == Resolution::deny   ? EscalationState::denied
                                                       : EscalationState::completed;
    int changed = Statement(db_, "UPDATE escalations SET state = ?, receipt = ?, note = ?, "
                                 "resolved_at = ?, resolved_by = 'operator' WHERE id = ? AND state = 'open'")
                      .bind(1, to_string(target))
                      .bind(2, r.receipt)
                      .bind(3, r.note)
                      .bind(4, now)
                      .bind(5, r.escalation_id)
                      .run();
    auto escalation = load_escalation(r.escalation_id);
    if (changed == 0) throw Abort{errc::illegal_transition};
    if (escalation.intent_id && r.resolution != Resolution::approve) {
      bool complete = r.resolution == Resolution::complete;
      keep_first_attempt(*escalation.intent_id);
      int settled =
          Statement(db_, sql("UPDATE intents SET state = ?, receipt = CASE WHEN ? = '' THEN "
                             "receipt ELSE ? END, unknown_since = NULL, updated_at = ? "
                             "WHERE id = ? AND ",
                             sql_state_guard(resolution_sources(r.resolution))))
              .bind(1, to_string(complete ? IntentState::completed : IntentState::denied))
              .bind(2, r.receipt)
              .bind(3, r.receipt)
              .bind(4, now)
              .bind(5, *escalation.intent_id)
              .run();
      if (settled == 0) throw Abort{errc::illegal_transition};
    }
    return escalation;
  });
}

Result<void> SqliteStore::record_refusal(std::int64_t intent_id, const std::string& reason_code) {
  return transact(Lock::write, [&] {
    int inserted =
        Statement(db_, "INSERT INTO refusals (intent_id, run_id, tool, fingerprint, reason_code, "
                       "created_at) SELECT id, run_id, tool, fingerprint, ?, ? FROM intents "
                       "WHERE id = ?")
            .bind(1, reason_code)
            .bind(2, now_epoch_ms())
            .bind(3, intent_id)
            .run();
    if (inserted == 0) throw Abort{errc::not_found};
  });
}

Result<Signals> SqliteStore::read_signals(TimePoint since) {
  return transact(Lock::read, [&] {
    // The views' hours are "YYYY-MM-DDTHH:00:00Z" text: compared as text.
    Statement hour_of(db_, "SELECT strftime('%Y-%m-%dT%H:00:00Z', ? / 1000, 'unixepoch')");
    hour_of.bind(1, std::int64_t{since.time_since_epoch().count()});
    hour_of.step();
    std::string const from = hour_of.text(0);
    Signals out;
    Statement open(db_, "SELECT reason_code, count(*) FROM escalations WHERE state = 'open' "
                        "GROUP BY reason_code ORDER BY reason_code");
    while (open.step()) out.open_escalations.push_back({open.text(0), open.int64(1)});
    Statement hourly(db_, "SELECT hour, reason_code, escalations FROM dash_escalations_by_reason_hourly "
                          "WHERE hour >= ? ORDER BY hour, reason_code");
    hourly.bind(1, from);
    while (hourly.step()) out.escalations_by_hour.push_back({hourly.text(0), hourly.text(1), hourly.int64(2)});
    Statement depth(db_, "SELECT tool, depth, intents FROM dash_retry_depth ORDER BY tool, depth");
    while (depth.step())
      out.retry_depth.push_back({depth.text(0), static_cast<int>(depth.int64(1)), depth.int64(2)});
    Statement refusals(db_, "SELECT hour, tool, reason_code, refusals, fingerprints "
                            "FROM dash_same_fingerprint_refusals WHERE hour >= ? ORDER BY hour, tool, reason_code");
    refusals.bind(1, from);
    while (refusals.step())
      out.refusals_by_hour.push_back(
          {refusals.text(0), refusals.text(1), refusals.text(2), refusals.int64(3), refusals.int64(4)});
    Statement unknown(db_, "SELECT count(*) FROM dash_unknown_past_ttl");
    unknown.step();
    out.unknown_past_ttl = unknown.int64(0);
    Statement duplicates(db_, "SELECT count(*) FROM dash_duplicate_receipts");
    duplicates.step();
    out.duplicate_receipts = duplicates.int64(0);
    return out;
  });
}

}  // namespace idemgate::ledger
