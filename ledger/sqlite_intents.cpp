// The SQLite backend's intents (see sqlite_store.hpp): reservations,
// attempts, outcomes, the reads of intents, and recovering expired leases.
#include "ledger/sqlite_store.hpp"

#include "ledger/sqlite_support.hpp"
#include "ledger/transitions.hpp"

#include <algorithm>

namespace idemgate::ledger {

Intent SqliteStore::load_intent(std::int64_t id) {
  Statement s(db_, sql("SELECT ", intent_columns, " FROM intents WHERE id = ?"));
  s.bind(1, id);
  if (!s.step()) throw Abort{errc::not_found};
  return read_intent(s);
}

Reservation SqliteStore::reserve_one(const ReserveRequest& r, std::int64_t now) {
  if (!r.agent_key.empty()) {
    Statement bound(db_, "SELECT fingerprint, intent_id FROM agent_keys "
                         "WHERE scope = ? AND agent_key = ?");
    bound.bind(1, r.scope).bind(2, r.agent_key);
    if (bound.step() && bound.text(0) != r.fingerprint)
      return {ReserveOutcome::key_mismatch, load_intent(bound.int64(1))};
  }
  // A live intent whose window has passed and that holds no unresolved
  // dispatch gives its fingerprint up to the new reservation.
  Statement(db_, sql("UPDATE intents SET superseded = 1 WHERE scope = ? AND fingerprint = ? "
                     "AND superseded = 0 AND window_until <= ? AND ",
                     sql_state_guard({IntentState::reserved, IntentState::completed,
                                      IntentState::denied, IntentState::retryable})))
      .bind(1, r.scope)
      .bind(2, r.fingerprint)
      .bind(3, now)
      .run();
  Reservation result;
  Statement live(db_, "SELECT id FROM intents WHERE scope = ? AND fingerprint = ? AND superseded = 0");
  live.bind(1, r.scope).bind(2, r.fingerprint);
  if (live.step()) {
    result = {ReserveOutcome::existing, load_intent(live.int64(0))};
  } else {
    Statement insert(
        db_,
        "INSERT INTO intents (run_id, tool, scope, fingerprint, idem_key, state, "
        "redacted_request, window_ms, unknown_ttl_ms, created_at, updated_at, window_until) "
        "VALUES (?, ?, ?, ?, ?, 'reserved', ?, ?, ?, ?, ?, ?) RETURNING id");
    insert.bind(1, r.run).bind(2, r.tool).bind(3, r.scope).bind(4, r.fingerprint).bind(5, r.key);
    insert.bind(6, r.request_snapshot).bind(7, std::int64_t{r.window.count()});
    insert.bind(8, std::int64_t{r.unknown_ttl.count()}).bind(9, now).bind(10, now);
    insert.bind(11, now + r.window.count());
    insert.step();
    auto id = insert.int64(0);
    insert.run();
    result = {ReserveOutcome::reserved, load_intent(id)};
  }
  if (!r.agent_key.empty())
    Statement(db_, "INSERT INTO agent_keys (scope, agent_key, fingerprint, intent_id, created_at) "
                   "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING")
        .bind(1, r.scope)
        .bind(2, r.agent_key)
        .bind(3, r.fingerprint)
        .bind(4, result.intent.id)
        .bind(5, now)
        .run();
  return result;
}

std::vector<Result<Reservation>> SqliteStore::reserve_intents(
    std::span<const ReserveRequest> requests) {
  std::vector<Result<Reservation>> results(requests.size(),
                                           boost::system::error_code(errc::invalid_argument));
  auto batch = transact(Lock::write, [&] {
    auto now = now_epoch_ms();
    std::vector<Result<Reservation>> done = results;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (!valid(requests[i])) continue;
      auto reservation = reserve_one(requests[i], now);
      if (reservation.outcome == ReserveOutcome::reserved && requests[i].start) {
        const auto& start = *requests[i].start;
        auto begun = begin_one(AttemptRequest{reservation.intent.id, IntentState::reserved, 0, 1, start.lease},
                               start.replica, now, false);
        if (begun.outcome != AttemptOutcome::started) throw Abort{errc::conflict};  // a fresh row always begins
        reservation.intent = std::move(begun.intent);
        reservation.started = true;
      }
      done[i] = std::move(reservation);
    }
    return done;
  });
  if (!batch) {
    for (auto& r : results) r = batch.error();
    return results;
  }
  return std::move(*batch);
}

Result<AttemptStart> SqliteStore::begin_attempt(const AttemptRequest& r, const std::string& replica) {
  return transact(Lock::write, [&] { return begin_one(r, replica, now_epoch_ms()); });
}

AttemptStart SqliteStore::begin_one(const AttemptRequest& r, const std::string& replica, std::int64_t now,
                                    bool with_row) {
  {
    // A retry of an answered first attempt kept on its intent: its row
    // first, from the intent as that attempt left it.
    if (with_row && r.expected_attempts == 1) keep_first_attempt(r.intent_id);
    auto lease_until = now + r.lease.count();
    Statement update(db_, sql("UPDATE intents SET state = 'dispatched', attempts = attempts + 1, "
                              "lease_until = ?4, updated_at = ?1, replica_id = coalesce(?7, replica_id) "
                              "WHERE id = ?2 AND state = ?5 AND attempts = ?6 AND attempts - waived < ?3 AND "
                              "(retry_not_before IS NULL OR retry_not_before <= ?1) AND ",
                              sql_state_guard(dispatchable_states())));
    update.bind(1, now)
        .bind(2, r.intent_id)
        .bind(3, std::int64_t{r.max_attempts})
        .bind(4, lease_until)
        .bind(5, to_string(r.expected_state))
        .bind(6, std::int64_t{r.expected_attempts});
    // The replica of a first attempt that lives on its intent (kept by the
    // attempts begun apart after it, which have rows of their own).
    if (with_row) {
      update.bind_null(7);
    } else {
      update.bind(7, replica);
    }
    int changed = update.run();
    if (changed == 0) {
      auto intent = load_intent(r.intent_id);
      auto why = refusal_reason(intent, r);
      return AttemptStart{why, 0, std::move(intent)};
    }
    auto intent = load_intent(r.intent_id);
    if (!with_row) return AttemptStart{AttemptOutcome::started, intent.attempts, std::move(intent)};
    Statement(db_, "INSERT INTO attempts (intent_id, number, replica_id, state, started_at, lease_until) "
                   "VALUES (?, ?, ?, 'dispatched', ?, ?)")
        .bind(1, r.intent_id)
        .bind(2, std::int64_t{intent.attempts})
        .bind(3, replica)
        .bind(4, now)
        .bind(5, lease_until)
        .run();
    return AttemptStart{AttemptOutcome::started, intent.attempts, std::move(intent)};
  }
}

void SqliteStore::keep_first_attempt(std::int64_t intent_id) {
  Statement(db_, "INSERT INTO attempts (intent_id, number, replica_id, state, answer_class, status, receipt, "
                 "recovered, started_at, finished_at, lease_until) SELECT * FROM attempts_on_intents "
                 "WHERE intent_id = ?")
      .bind(1, intent_id)
      .run();
}

Result<Intent> SqliteStore::record_outcome(const Outcome& o) {
  return transact(Lock::write, [&] {
    auto now = now_epoch_ms();
    bool with_attempt = o.attempt > 0;
    auto sources = settle_sources(o.state, with_attempt);
    if (!with_attempt) keep_first_attempt(o.intent_id);  // a refusal of a retryable intent
    std::string text =
        "UPDATE intents SET state = ?1, answer_class = ?2, status = ?3, "
        "receipt = CASE WHEN ?4 = '' THEN receipt ELSE ?4 END, updated_at = ?5, "
        "unknown_since = CASE WHEN ?1 = 'unknown' THEN coalesce(unknown_since, ?5) ELSE NULL END, "
        "retry_not_before = ?6, waived = waived + ?13";
    if (o.response)
      text += ", response_status = ?7, response_headers = ?8, response_body = ?9, "
              "response_truncated = ?10";
    text += " WHERE id = ?11 AND " + sql_state_guard(sources);
    if (with_attempt) text += " AND attempts = ?12";
    Statement update(db_, text);
    update.bind(1, to_string(o.state)).bind(2, o.answer_class);
    update.bind(3, o.status ? std::optional<std::int64_t>(*o.status) : std::nullopt);
    update.bind(4, o.receipt).bind(5, now);
    update.bind(6, o.retry_after ? std::optional<std::int64_t>(now + o.retry_after->count())
                                 : std::nullopt);
    if (o.response) {
      update.bind(7, std::int64_t{o.response->status});
      update.bind(8, encode_headers(o.response->headers));
      update.bind_blob(9, o.response->body);
      update.bind(10, std::int64_t{o.response->truncated});
    }
    update.bind(11, o.intent_id);
    if (with_attempt) update.bind(12, std::int64_t{o.attempt});
    update.bind(13, std::int64_t{o.waive ? 1 : 0});
    if (update.run() == 0) {
      load_intent(o.intent_id);  // not_found when there is no such intent
      throw Abort{errc::illegal_transition};
    }
    if (with_attempt) {
      // The attempt's row, or (a first attempt begun with its reservation,
      // which has none yet) the row written now that it ends unknown. One
      // answered stays on its intent (attempts_on_intents).
      // ?1-?5 how it ended, ?6 its intent.
      auto ended = [&](Statement& s) -> Statement& {
        return s.bind(1, to_string(o.state == IntentState::unknown ? AttemptState::unknown : AttemptState::answered))
            .bind(2, o.answer_class)
            .bind(3, o.status ? std::optional<std::int64_t>(*o.status) : std::nullopt)
            .bind(4, o.receipt)
            .bind(5, now)
            .bind(6, o.intent_id);
      };
      Statement update(db_, "UPDATE attempts SET state = ?1, answer_class = ?2, status = ?3, receipt = ?4, "
                            "finished_at = ?5 WHERE intent_id = ?6 AND number = ?7 "
                            "AND state IN ('dispatched', 'unknown')");
      if (ended(update).bind(7, std::int64_t{o.attempt}).run() == 0 && o.attempt == 1 &&
          o.state == IntentState::unknown) {
        Statement insert(db_, "INSERT INTO attempts (intent_id, number, replica_id, state, answer_class, status, "
                              "receipt, started_at, finished_at, lease_until) SELECT id, 1, replica_id, ?1, ?2, ?3, "
                              "?4, created_at, ?5, lease_until FROM intents WHERE id = ?6 AND replica_id IS NOT NULL "
                              "AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.intent_id = intents.id AND "
                              "a.number = 1)");
        ended(insert).run();
      }
    }
    if (o.state != IntentState::unknown) settle_unknown_escalations(o.intent_id, o.answer_class, o.receipt, now);
    return load_intent(o.intent_id);
  });
}

Result<Intent> SqliteStore::find_intent(std::int64_t intent_id) {
  return transact(Lock::read, [&] { return load_intent(intent_id); });
}

Result<Intent> SqliteStore::find_intent_by_key(const std::string& key) {
  return transact(Lock::read, [&] {
    Statement s(db_, sql("SELECT ", intent_columns,
                         " FROM intents WHERE idem_key = ?1 OR id IN "
                         "(SELECT intent_id FROM agent_keys WHERE agent_key = ?1) "
                         "ORDER BY id DESC LIMIT 1"));
    s.bind(1, key);
    if (!s.step()) throw Abort{errc::not_found};
    return read_intent(s);
  });
}

Result<std::vector<Intent>> SqliteStore::list_intents_by_run(const std::string& run, int limit) {
  return transact(Lock::read, [&] {
    Statement s(db_, sql("SELECT ", intent_columns,
                         " FROM intents WHERE run_id = ? ORDER BY id DESC LIMIT ?"));
    s.bind(1, run).bind(2, std::int64_t{limit});
    std::vector<Intent> out;
    while (s.step()) out.push_back(read_intent(s));
    return out;
  });
}

Result<std::int64_t> SqliteStore::count_intents(const std::string& run, const std::string& tool,
                                                const std::string& answer_class,
                                                std::int64_t except_intent) {
  return transact(Lock::read, [&] {
    Statement s(db_, "SELECT count(*) FROM intents WHERE run_id = ? AND tool = ? AND "
                     "answer_class = ? AND id <> ?");
    s.bind(1, run).bind(2, tool).bind(3, answer_class).bind(4, except_intent);
    s.step();
    return s.int64(0);
  });
}

Result<std::vector<Intent>> SqliteStore::list_unknown_past_ttl(int limit) {
  return transact(Lock::read, [&] {
    Statement s(db_, sql("SELECT ", intent_columns,
                         " FROM intents WHERE state = 'unknown' AND unknown_since + "
                         "unknown_ttl_ms <= ? ORDER BY unknown_since LIMIT ?"));
    s.bind(1, now_epoch_ms()).bind(2, std::int64_t{limit});
    std::vector<Intent> out;
    while (s.step()) out.push_back(read_intent(s));
    return out;
  });
}

Result<std::vector<Intent>> SqliteStore::list_unescalated_unknowns(int limit) {
  return transact(Lock::read, [&] {
    Statement s(db_, sql("SELECT ", intent_columns,
                         " FROM intents i WHERE state = 'unknown' AND unknown_since + "
                         "unknown_ttl_ms <= ? AND NOT EXISTS (SELECT 1 FROM escalations e WHERE "
                         "e.intent_id = i.id AND e.reason_code IN ('money_unknown', 'tool_outcome_unknown')) "
                         "ORDER BY unknown_since LIMIT ?"));
    s.bind(1, now_epoch_ms()).bind(2, std::int64_t{limit});
    std::vector<Intent> out;
    while (s.step()) out.push_back(read_intent(s));
    return out;
  });
}

Result<std::vector<Intent>> SqliteStore::claim_lookups(std::span<const LookupDue> due, int limit) {
  if (due.empty()) return std::vector<Intent>{};
  return transact(Lock::write, [&] {
    std::string text =
        "UPDATE intents SET looked_up_at = ? WHERE id IN (SELECT id FROM intents WHERE state = 'unknown' AND "
        "looked_up_at IS NULL AND (";
    for (std::size_t i = 0; i < due.size(); ++i) {
      if (i) text += " OR ";
      text += "(tool = ? AND unknown_since + ? <= ?)";
    }
    text += sql(") ORDER BY unknown_since LIMIT ?) RETURNING ", intent_columns);
    Statement s(db_, text);
    auto const now = now_epoch_ms();
    int n = 1;
    s.bind(n++, now);
    for (auto const& d : due) {
      s.bind(n, d.tool).bind(n + 1, std::int64_t{d.after.count()}).bind(n + 2, now);
      n += 3;
    }
    s.bind(n, std::int64_t{limit});
    std::vector<Intent> out;
    while (s.step()) out.push_back(read_intent(s));
    std::sort(out.begin(), out.end(), [](const Intent& a, const Intent& b) { return a.unknown_since < b.unknown_since; });
    return out;
  });
}

// What is in flight is found two ways: an attempt begun apart through its
// attempts row (attempts_lease), a first attempt begun with its reservation
// through its intent (intents_in_flight), whose row is written here first,
// dispatched, so that one recovery turns both kinds unknown.
Result<int> SqliteStore::recover_expired() {
  return transact(Lock::write, [&] {
    auto now = now_epoch_ms();
    Statement(db_, "INSERT INTO attempts (intent_id, number, replica_id, state, started_at, lease_until) "
                   "SELECT id, 1, replica_id, 'dispatched', created_at, lease_until FROM intents "
                   "WHERE state = 'dispatched' AND lease_until < ?1 AND replica_id IS NOT NULL AND attempts = 1 "
                   "AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.intent_id = intents.id AND a.number = 1)")
        .bind(1, now)
        .run();
    int intents = Statement(db_, "UPDATE intents SET state = 'unknown', recovered = 1, "
                                 "unknown_since = coalesce(unknown_since, ?1), updated_at = ?1, "
                                 "lease_until = NULL WHERE id IN (SELECT intent_id FROM attempts WHERE "
                                 "state = 'dispatched' AND lease_until < ?1) AND state = 'dispatched' "
                                 "AND lease_until < ?1")
                      .bind(1, now)
                      .run();
    Statement(db_, "UPDATE attempts SET state = 'unknown', recovered = 1, finished_at = ?1 "
                   "WHERE state = 'dispatched' AND lease_until < ?1")
        .bind(1, now)
        .run();
    return intents;
  });
}

}  // namespace idemgate::ledger
