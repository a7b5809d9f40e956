// PgStore's reads of intents (see store.hpp): by id, key and run, the
// counts the verdicts use, the unknown ones the sweepers look for, and the
// claims of background lookups.
#include "ledger/pg_store.hpp"

#include "ledger/pg_support.hpp"

#include <algorithm>

namespace idemgate::ledger {

Result<Intent> PgStore::find_intent(std::int64_t intent_id) {
  return transact([&](pqxx::transaction_base& w) { return load_intent(w, intent_id); });
}

Result<Intent> PgStore::find_intent_by_key(const std::string& key) {
  return transact([&](pqxx::transaction_base& w) {
    auto k = q(w, key);
    auto rows = w.exec(select_intents("idem_key = " + k +
                                      " OR id IN (SELECT intent_id FROM agent_keys WHERE "
                                      "agent_key = " + k + ") ORDER BY id DESC LIMIT 1"));
    if (rows.empty()) throw Abort{errc::not_found};
    return read_intent(PgRow(rows[0]));
  });
}

Result<std::vector<Intent>> PgStore::list_intents_by_run(const std::string& run, int limit) {
  return transact([&](pqxx::transaction_base& w) {
    std::vector<Intent> out;
    for (const auto& row : w.exec(select_intents("run_id = " + q(w, run) +
                                                 " ORDER BY id DESC LIMIT " +
                                                 std::to_string(limit))))
      out.push_back(read_intent(PgRow(row)));
    return out;
  });
}

Result<std::int64_t> PgStore::count_intents(const std::string& run, const std::string& tool,
                                            const std::string& answer_class,
                                            std::int64_t except_intent) {
  return transact([&](pqxx::transaction_base& w) {
    return w
        .exec("SELECT count(*) FROM intents WHERE run_id = " + q(w, run) + " AND tool = " +
              q(w, tool) + " AND answer_class = " + q(w, answer_class) +
              " AND id <> " + std::to_string(except_intent))[0][0]
        .as<std::int64_t>();
  });
}

// "unknown_since IS NOT NULL" (implied by the state) is the predicate of the
// unknown indexes (intents_unknown, intents_lookup_due), named so that the
// planner uses them.
Result<std::vector<Intent>> PgStore::list_unknown_past_ttl(int limit) {
  return transact([&](pqxx::transaction_base& w) {
    std::vector<Intent> out;
    for (const auto& row : w.exec(select_intents(
             "state = 'unknown' AND unknown_since IS NOT NULL AND "
             "unknown_since + unknown_ttl_ms * interval '1 millisecond' "
             "<= now() ORDER BY unknown_since LIMIT " + std::to_string(limit))))
      out.push_back(read_intent(PgRow(row)));
    return out;
  });
}

Result<std::vector<Intent>> PgStore::list_unescalated_unknowns(int limit) {
  return transact([&](pqxx::transaction_base& w) {
    std::vector<Intent> out;
    for (const auto& row : w.exec(select_intents(
             "state = 'unknown' AND unknown_since IS NOT NULL AND "
             "unknown_since + unknown_ttl_ms * interval '1 millisecond' "
             "<= now() AND NOT EXISTS (SELECT 1 FROM escalations e WHERE e.intent_id = intents.id "
             "AND e.reason_code IN ('money_unknown', 'tool_outcome_unknown')) "
             "ORDER BY unknown_since LIMIT " + std::to_string(limit))))
      out.push_back(read_intent(PgRow(row)));
    return out;
  });
}

Result<std::vector<Intent>> PgStore::claim_lookups(std::span<const LookupDue> due, int limit) {
  if (due.empty()) return std::vector<Intent>{};
  return transact([&](pqxx::transaction_base& w) {
    std::string which;
    for (auto const& d : due)
      which += (which.empty() ? "" : " OR ") + std::string("(tool = ") + q(w, d.tool) + " AND unknown_since + " +
               q_millis(d.after) + " <= now())";
    // SKIP LOCKED: two replicas' sweepers claim different intents, never one twice.
    std::vector<Intent> out;
    for (const auto& row : w.exec("UPDATE intents SET looked_up_at = now() WHERE id IN (SELECT id FROM intents "
                                  "WHERE state = 'unknown' AND unknown_since IS NOT NULL AND looked_up_at IS NULL "
                                  "AND (" + which +
                                  ") ORDER BY unknown_since LIMIT " + std::to_string(limit) +
                                  " FOR UPDATE SKIP LOCKED) RETURNING " + std::string(intent_columns)))
      out.push_back(read_intent(PgRow(row)));
    std::sort(out.begin(), out.end(), [](const Intent& a, const Intent& b) { return a.unknown_since < b.unknown_since; });
    return out;
  });
}

}  // namespace idemgate::ledger
