// PgStore's attempts (see store.hpp): the attempts begun one at a time or
// in a batch, their outcomes, and the recovery of attempts whose lease ran
// out. Reservations and admissions are in pg_admissions.cpp, the reads and
// claims of intents in pg_reads.cpp.
#include "ledger/pg_store.hpp"

#include "ledger/pg_support.hpp"
#include "ledger/transitions.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <map>
#include <set>

namespace idemgate::ledger {

Result<AttemptStart> PgStore::begin_attempt(const AttemptRequest& r, const std::string& replica) {
  return transact([&](pqxx::transaction_base& w) {
    auto id = std::to_string(r.intent_id);
    auto lease = "now() + " + q_millis(r.lease);
    // Compare-and-set: concurrent callers (any replica) serialise on the row
    // lock and re-check the guard against what their verdict was made from,
    // so one of them moves it to dispatched and the others decide again.
    // A retry of an answered first attempt kept on its intent writes that
    // attempt's row first, in the same round trip.
    auto changed = w.exec(
        (r.expected_attempts == 1 ? keep_first_attempts(id) : std::string()) +
        "UPDATE intents SET state = 'dispatched', attempts = attempts + 1, updated_at = now(), "
        "lease_until = " + lease + " WHERE id = " + id + " AND state = " + q(w, to_string(r.expected_state)) +
        " AND attempts = " + std::to_string(r.expected_attempts) +
        " AND attempts - waived < " + std::to_string(r.max_attempts) +
        " AND (retry_not_before IS NULL OR retry_not_before <= now()) AND " +
        sql_state_guard(dispatchable_states()) + " RETURNING " + std::string(intent_columns));
    if (changed.empty()) {
      auto intent = load_intent(w, r.intent_id);
      auto why = refusal_reason(intent, r);
      return AttemptStart{why, 0, std::move(intent)};
    }
    auto intent = read_intent(PgRow(changed[0]));
    w.exec("INSERT INTO attempts (intent_id, number, replica_id, state, lease_until) VALUES (" + id + ", " +
           std::to_string(intent.attempts) + ", " + q(w, replica) + ", 'dispatched', " + lease + ")");
    int number = intent.attempts;
    return AttemptStart{AttemptOutcome::started, number, std::move(intent)};
  });
}

std::vector<Result<AttemptStart>> PgStore::begin_attempts(std::span<const AttemptRequest> requests,
                                                          const std::string& replica) {
  if (requests.size() == 1) return {begin_attempt(requests.front(), replica)};
  std::vector<Result<AttemptStart>> results(requests.size(), error_code(errc::invalid_argument));
  auto batch = transact([&](pqxx::transaction_base& w) {
    // begin_attempt's compare-and-set for many intents: one UPDATE, one
    // INSERT of the attempts, one read back, whatever the count.
    std::string values, seconds;
    for (const auto& r : requests) {
      values += (values.empty() ? "(" : ",(") + std::to_string(r.intent_id) + "::bigint," +
                q(w, to_string(r.expected_state)) + "," + std::to_string(r.expected_attempts) + "," +
                std::to_string(r.max_attempts) + "," + std::to_string(r.lease.count()) + "::bigint)";
      if (r.expected_attempts == 1) seconds += (seconds.empty() ? "" : ",") + std::to_string(r.intent_id);
    }
    // (idemgate_keep_first_attempts writes its rows in id order, whatever
    // order the ids come in: callers sharing intents wait in one order.)
    std::map<std::int64_t, int> started;
    std::map<std::int64_t, Intent> now;
    for (const auto& row : w.exec(
             (seconds.empty() ? std::string() : keep_first_attempts(seconds)) +
             "WITH v(id, expected_state, expected_attempts, max_attempts, lease_ms) AS (VALUES " + values +
             "), begun AS (UPDATE intents SET state = 'dispatched', attempts = intents.attempts + 1, "
             "updated_at = now(), lease_until = now() + v.lease_ms * interval '1 millisecond' FROM v "
             "WHERE intents.id = v.id AND intents.state = v.expected_state AND intents.attempts = v.expected_attempts "
             "AND intents.attempts - intents.waived < v.max_attempts AND (intents.retry_not_before IS NULL OR "
             "intents.retry_not_before <= now()) AND " + sql_state_guard(dispatchable_states(), "intents.state") +
             " RETURNING intents.*), "
             "recorded AS (INSERT INTO attempts (intent_id, number, replica_id, state, lease_until) "
             "SELECT id, attempts, " + q(w, replica) + ", 'dispatched', lease_until FROM begun) "
             "SELECT " + std::string(intent_columns) + " FROM begun")) {
      auto intent = read_intent(PgRow(row));
      started[intent.id] = intent.attempts;
      now[intent.id] = std::move(intent);
    }
    // The refused ones as they are now (what they were refused for).
    std::string refused;
    for (const auto& r : requests)
      if (!started.count(r.intent_id)) refused += (refused.empty() ? "" : ",") + std::to_string(r.intent_id);
    if (!refused.empty())
      for (const auto& row : w.exec(select_intents("id IN (" + refused + ")"))) {
        auto intent = read_intent(PgRow(row));
        now[intent.id] = std::move(intent);
      }
    std::vector<Result<AttemptStart>> done;
    for (const auto& r : requests) {
      auto found = now.find(r.intent_id);
      if (found == now.end()) {
        done.emplace_back(error_code(errc::not_found));
        continue;
      }
      auto s = started.find(r.intent_id);
      if (s != started.end())
        done.emplace_back(AttemptStart{AttemptOutcome::started, s->second, found->second});
      else
        done.emplace_back(AttemptStart{refusal_reason(found->second, r), 0, found->second});
    }
    return done;
  });
  if (!batch) {
    for (auto& r : results) r = batch.error();
    return results;
  }
  return std::move(*batch);
}

// One outcome is a round of one: the same statement, so that the one-by-one
// and the batched forms cannot drift apart.
Result<Intent> PgStore::record_outcome(const Outcome& o) { return std::move(record_outcomes({&o, 1}).front()); }

std::vector<Result<Intent>> PgStore::record_outcomes(std::span<const Outcome> outcomes) {
  std::vector<Result<Intent>> results(outcomes.size(), error_code(errc::invalid_argument));
  // Rounds: round k holds the k-th outcome of each intent, so a statement
  // updates an intent once and an intent's outcomes apply in their order.
  std::vector<std::vector<std::size_t>> rounds;
  std::map<std::int64_t, std::size_t> seen;
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    auto k = seen[outcomes[i].intent_id]++;
    if (rounds.size() <= k) rounds.emplace_back();
    rounds[k].push_back(i);
  }
  for (auto& round : rounds) {
    // record_outcome for the whole round in one statement (the function
    // idemgate_record_outcomes): the intents' compare-and-set, their
    // attempts and their escalations, the intents as they are now read back.
    // Outside a batch it is its own transaction (no BEGIN and COMMIT round
    // trips); in a deferred batch its commit does not wait for the disk.
    std::sort(round.begin(), round.end(),
              [&](auto a, auto b) { return outcomes[a].intent_id < outcomes[b].intent_id; });  // the lock order
    auto applied = transact([&](pqxx::transaction_base& w) {
      using Of = ArrayParam::Of;
      ArrayParam id(Of::int8), state(Of::text), answer_class(Of::text), status(Of::int4), retry_ms(Of::int8),
          waive(Of::int4), receipt(Of::text), has_response(Of::boolean), response_status(Of::int4),
          response_headers(Of::text), response_body(Of::bytea), response_truncated(Of::boolean), attempt(Of::int4),
          attempt_state(Of::text), sources(Of::text), note(Of::text);
      for (auto i : round) {
        const auto& o = outcomes[i];
        const auto* r = o.response ? &*o.response : nullptr;
        std::string from;
        for (auto s : settle_sources(o.state, o.attempt > 0)) {
          if (!from.empty()) from += ',';
          from += to_string(s);
        }
        id.number(o.intent_id);
        state.text(to_string(o.state));
        answer_class.text(o.answer_class);
        status.number_or_null(o.status);
        retry_ms.number_or_null(o.retry_after ? std::optional(o.retry_after->count()) : std::nullopt);
        waive.number(o.waive ? 1 : 0);
        receipt.text(o.receipt);
        has_response.flag(r != nullptr);
        r ? response_status.number(r->status) : response_status.null();
        r ? response_headers.text(encode_headers(r->headers)) : response_headers.null();
        r ? response_body.bytes(r->body) : response_body.null();
        response_truncated.flag(r && r->truncated);
        attempt.number(o.attempt);
        attempt_state.text(to_string(o.state == IntentState::unknown ? AttemptState::unknown : AttemptState::answered));
        sources.text(from);
        note.text("settled by reconciliation: " + o.answer_class);
      }
      auto const ids = id.param();
      // After their answers the ids alone come back (Store::record_outcome),
      // and each intent is its id and new state: nothing else is read or
      // moved (most outcomes).
      bool const ids_only =
          std::all_of(round.begin(), round.end(), [&](auto i) { return outcomes[i].after_answer; });
      std::map<std::int64_t, Intent> settled;
      std::vector<std::int64_t> settled_ids;
      for (const auto& row :
           w.exec_prepared(ids_only ? "record_outcomes_ids" : "record_outcomes", ids, state.param(), answer_class.param(),
                           status.param(), retry_ms.param(), waive.param(), receipt.param(), has_response.param(),
                           response_status.param(), response_headers.param(), response_body.param(),
                           response_truncated.param(), attempt.param(), attempt_state.param(), sources.param(),
                           note.param(), deferring_)) {
        if (ids_only) {
          settled_ids.push_back(row[0].as<std::int64_t>());
        } else {
          auto intent = read_intent(PgRow(row));
          settled_ids.push_back(intent.id);
          settled.insert_or_assign(intent.id, std::move(intent));
        }
      }
      std::sort(settled_ids.begin(), settled_ids.end());
      // The rest were refused: illegal_transition when the intent exists.
      std::set<std::int64_t> exists;
      if (settled_ids.size() < round.size())
        for (const auto& row : w.exec_prepared("intents_exist", ids))
          exists.insert(row[0].as<long long>());
      std::vector<Result<Intent>> done;
      done.reserve(round.size());
      for (auto i : round) {
        auto const id = outcomes[i].intent_id;
        if (std::binary_search(settled_ids.begin(), settled_ids.end(), id)) {
          if (ids_only) {
            auto& shown = *done.emplace_back(Intent{});
            shown.id = id;
            shown.state = outcomes[i].state;
          } else {
            done.emplace_back(std::move(settled.at(id)));
          }
          continue;
        }
        auto const why = exists.count(id) ? errc::illegal_transition : errc::not_found;
        // Alone, a refusal is the call's failure (a batch of one caller's
        // calls fails with it), as record_outcome's always was.
        if (round.size() == 1) throw Abort{why};
        done.emplace_back(error_code(why));
      }
      return done;
    }, Commit::one_statement);
    if (applied) {
      for (std::size_t k = 0; k < round.size(); ++k) results[round[k]] = std::move((*applied)[k]);
    } else if (round.size() > 1 && (!batch_ || !batch_->error) && applied.error() == errc::storage_failure) {
      // One bad row (a value the server refused) fails the statement: the
      // round's outcomes one by one, so only that one fails.
      for (auto i : round) results[i] = record_outcome(outcomes[i]);
    } else {
      for (auto i : round) results[i] = applied.error();
    }
  }
  return results;
}

namespace {

// The first attempts the lease sweep looks at for the horizon `to_text` (a
// time read under the lease lock), as a condition on intents: those whose
// lease ended since the stored horizon, which it moves. `since_last` is at
// most how long since this process's last completed sweep read its horizon
// (none: no earlier sweep).
std::string first_attempts_due(pqxx::transaction_base& w, const std::string& to_text,
                               std::optional<std::chrono::steady_clock::duration> since_last) {
  auto const to = q(w, to_text) + "::timestamptz";
  auto const stored = w.exec("SELECT horizon::text, horizon > " + to + " FROM lease_sweep");
  if (stored.empty()) return "false";
  std::string from = q(w, stored[0][0].as<std::string>()) + "::timestamptz";
  bool const went_back = stored[0][1].as<bool>();
  if (went_back) {
    // The clock is behind the horizon: a lease set since it went back may
    // end before the horizon. Those leases were set after this process's
    // last sweep read its horizon (had the clock gone back before that, that
    // sweep would have seen it), on the clock as it is now: look from that
    // long before this horizon. A process with no earlier sweep looks at
    // every lease, however long that takes.
    if (!since_last) w.exec("SET LOCAL statement_timeout = 0");
    from = since_last ? to + " - interval '" +
                            std::to_string(std::chrono::duration_cast<Millis>(*since_last).count() + 1000) +
                            " milliseconds'"
                      : std::string("'-infinity'::timestamptz");
  }
  auto const in_range = "lease_until > " + from + " AND lease_until <= " + to;
  // Sweeps of other replicas at the same time may cover the same leases.
  // The horizon moves forward only past leases that ended (an idle ledger's
  // sweep writes nothing, so commits nothing to the disk), and back with the
  // clock.
  w.exec(went_back ? "UPDATE lease_sweep SET horizon = " + to
                   : "UPDATE lease_sweep SET horizon = " + to + " WHERE horizon < " + to +
                         " AND EXISTS (SELECT 1 FROM intents WHERE " + in_range + ")");
  return "(" + in_range + " AND replica_id IS NOT NULL AND attempts = 1)";
}

}  // namespace

// What is in flight is found two ways. An attempt begun apart (a retry, an
// attempt after an approval) has its attempts row, dispatched, in
// attempts_lease. A first attempt begun with its reservation lives on its
// intent until it ends (schema version 10): the sweep finds those whose
// lease ended since the last sweep through intents_lease_end and writes
// their rows, dispatched, so that one recovery turns both kinds unknown.
// Every intent it will update is locked first, in id order (the order
// outcomes lock intents in).
Result<int> PgStore::recover_expired() {
  // The time the sweep may reach, read with the lease lock held
  // exclusively: it waits for the admissions holding the lock (their
  // leases are committed before it is granted, and visible to the sweep)
  // and goes before those that ask after it (their leases are read from the
  // clock once it is released, and end after this time). It is held for
  // that read alone, so admissions wait a moment, not for the sweep. If it
  // does not come within lock_timeout, the first attempts wait for the next
  // sweep; the attempts begun apart are recovered all the same.
  auto const asked = std::chrono::steady_clock::now();
  auto horizon = transact([&](pqxx::transaction_base& w) {
    w.exec("SET LOCAL lock_timeout = '200ms'");
    w.exec(std::string(lease_horizon_lock));
    return w.exec("SELECT clock_timestamp()::text")[0][0].as<std::string>();
  });
  // At most how long since this process's last sweep read its horizon: from
  // before that read to after this one (a connection made meanwhile counts
  // in). After the server's clock went back, the leases set since may end
  // before the stored horizon (below).
  std::optional<std::chrono::steady_clock::duration> since_last;
  if (horizon && last_horizon_) since_last = std::chrono::steady_clock::now() - *last_horizon_;
  auto swept = transact([&](pqxx::transaction_base& w) {
    // The first attempts' part, as a condition on intents (none without a
    // horizon).
    auto const first = horizon ? first_attempts_due(w, *horizon, since_last) : std::string("false");
    // The intents to recover, locked in id order: the first attempts among
    // those leases still dispatched, and the intents of the attempts begun
    // apart whose lease has passed. One an outcome settles meanwhile is
    // passed over once that outcome commits.
    std::string ids, firsts;
    for (const auto& row : w.exec("SELECT id, " + first + " FROM intents WHERE id IN (SELECT id FROM intents WHERE " +
                                  first + " UNION SELECT intent_id FROM attempts WHERE state = 'dispatched' "
                                  "AND lease_until < now()) AND state = 'dispatched' ORDER BY id FOR UPDATE")) {
      std::string const id = row[0].c_str();
      ids += (ids.empty() ? "" : ",") + id;
      if (row[1].as<bool>()) firsts += (firsts.empty() ? "" : ",") + id;
    }
    // The first attempts' rows, dispatched (a row its outcome wrote first
    // is kept), which the recovery below turns unknown with the others.
    if (!firsts.empty())
      w.exec("INSERT INTO attempts (intent_id, number, replica_id, state, started_at, lease_until) "
             "SELECT id, 1, replica_id, 'dispatched', created_at, lease_until FROM intents WHERE id IN (" + firsts +
             ") ON CONFLICT DO NOTHING");
    int intents = 0;
    if (!ids.empty())
      intents = static_cast<int>(
          w.exec("UPDATE intents SET state = 'unknown', recovered = true, "
                 "unknown_since = coalesce(unknown_since, now()), updated_at = now(), lease_until = NULL "
                 "WHERE id IN (" + ids + ") AND id IN (SELECT intent_id FROM attempts WHERE state = 'dispatched' "
                 "AND lease_until < now()) AND state = 'dispatched' AND lease_until < now()")
              .affected_rows());
    w.exec("UPDATE attempts SET state = 'unknown', recovered = true, finished_at = now() "
           "WHERE state = 'dispatched' AND lease_until < now()");
    return intents;
  });
  // Only a sweep that committed counts as one: after a failed one the next
  // still looks back from this process's last sweep that did.
  if (swept && horizon) last_horizon_ = asked;
  // A horizon the lease lock (or the statement) timed out for: not one
  // whose connection failed, which the sweep's own failure or the
  // reconnect says.
  if (swept && !horizon && horizon.error() == errc::busy) horizon_misses_.fetch_add(1, std::memory_order_relaxed);
  return swept;
}

}  // namespace idemgate::ledger
