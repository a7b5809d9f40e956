// PgStore's reservations and admissions (see store.hpp): a batch's
// reservations in one statement, a lone admission's one statement and what
// finishes it when that statement could not do all of it. Attempts, their
// outcomes and lease recovery are in pg_intents.cpp; reads in pg_reads.cpp.
#include "ledger/pg_store.hpp"

#include "ledger/pg_support.hpp"
#include "ledger/transitions.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

namespace idemgate::ledger {
namespace {

// A row of reserve_intents' insert (reserved_columns): the id the server
// gave it, what matched it to `r`, the statement's now() and the lease it
// set. Everything else is what the request set, as the statement stored it,
// so it is taken from the request: a fresh row's defaults, created and
// updated now, its window from now. The times agree with
// the stored ones to the millisecond because extract() is exact numeric
// (PostgreSQL 14 and later).
Intent read_reserved(const pqxx::row& row, const ReserveRequest& r) {
  auto const now = row[4].as<std::int64_t>();
  Intent i;
  i.id = row[0].as<std::int64_t>();
  i.run = r.run;
  i.tool = r.tool;
  i.scope = r.scope;
  i.fingerprint = r.fingerprint;
  i.key = r.key;
  i.state = r.start ? IntentState::dispatched : IntentState::reserved;
  i.attempts = r.start ? 1 : 0;
  i.request_snapshot = r.request_snapshot;
  i.window = r.window;
  i.unknown_ttl = r.unknown_ttl;
  i.created_at = i.updated_at = from_epoch_ms(now);
  i.window_until = from_epoch_ms(now + r.window.count());
  if (r.start && !row[5].is_null()) i.lease_until = from_epoch_ms(row[5].as<std::int64_t>());
  return i;
}

}  // namespace

// A fresh insert (reserve_intents_sql) that a live fingerprint refused makes
// this many of the store's next reservations careful: one refusal costs a
// rerun, and while retries keep coming each batch pays ON CONFLICT's price
// instead of a rerun.
constexpr int careful_after_refusal = 64;

std::vector<Result<Reservation>> PgStore::reserve_intents(std::span<const ReserveRequest> requests) {
  std::vector<Result<Reservation>> results(requests.size(), error_code(errc::invalid_argument));
  // Careful from the start (decided once for the call: a body run again
  // after a deadlock is careful or fresh alike), or once a fresh insert
  // failed on a live fingerprint: nothing of the statement is written, and
  // the whole reservation runs again carefully (refused).
  bool careful = careful_reservations_ > 0;
  if (careful) --careful_reservations_;
  bool refused = false;
  auto reserve = [&](pqxx::transaction_base& w) {
    std::vector<Result<Reservation>> done = results;
    // Valid requests in (scope, fingerprint) order: concurrent batches then
    // take the unique-index locks in the same order and cannot deadlock.
    // Stable: of several requests for one fingerprint, the first asked wins,
    // as with SQLite.
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < requests.size(); ++i)
      if (valid(requests[i])) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) {
      return std::tie(requests[a].scope, requests[a].fingerprint) <
             std::tie(requests[b].scope, requests[b].fingerprint);
    });
    if (order.empty()) return done;

    auto bound_keys = [&] {
      std::map<std::pair<std::string, std::string>, std::pair<std::string, std::int64_t>> bound;
      std::string list;
      for (auto i : order)
        if (!requests[i].agent_key.empty())
          list += (list.empty() ? "(" : ",(") + q(w, requests[i].scope) + "," +
                  q(w, requests[i].agent_key) + ")";
      if (list.empty()) return bound;
      for (const auto& row : w.exec("SELECT scope, agent_key, fingerprint, intent_id FROM "
                                    "agent_keys WHERE (scope, agent_key) IN (" + list + ")")) {
        PgRow r(row);
        bound[{r.text(0), r.text(1)}] = {r.text(2), r.int64(3)};
      }
      return bound;
    };
    auto mismatch = [&](const auto& bound, std::size_t i) -> std::optional<std::int64_t> {
      const auto& r = requests[i];
      if (r.agent_key.empty()) return std::nullopt;
      auto it = bound.find({r.scope, r.agent_key});
      if (it == bound.end() || it->second.first == r.fingerprint) return std::nullopt;
      return it->second.second;
    };

    auto before = bound_keys();
    std::vector<std::size_t> live;
    for (auto i : order) {
      if (auto other = mismatch(before, i)) {
        done[i] = Reservation{ReserveOutcome::key_mismatch, load_intent(w, *other)};
        continue;
      }
      live.push_back(i);
    }
    if (live.empty()) return done;
    auto pair_of = [&](std::size_t i) { return "(" + q(w, requests[i].scope) + "," + q(w, requests[i].fingerprint) + ")"; };
    auto join = [&](const std::vector<std::size_t>& which, auto&& item) {
      std::string list;
      for (auto i : which) list += (list.empty() ? "" : ",") + item(i);
      return list;
    };
    // Group commit: one statement, one durable commit, many reservations.
    // Exactly one row per scope+fingerprint gets in; the others conflict.
    // The rows that got in come back (reserved_columns, read_reserved): no
    // read-back for them.
    std::map<std::pair<std::string, std::string>, Intent> rows;
    std::set<std::int64_t> inserted;
    // Requests with a start are inserted with attempt 1 begun, and their
    // attempts rows written by the same statement (all of one replica).
    std::string replica;
    for (auto i : live)
      if (requests[i].start) {
        if (!replica.empty() && replica != requests[i].start->replica) throw Abort{errc::invalid_argument};
        replica = requests[i].start->replica;
      }
    // `which` names each fingerprint once. Fresh unless the call is careful
    // or `over_live` (a superseded fingerprint's new row): a live fingerprint
    // among them fails the statement.
    auto insert = [&](const std::vector<std::size_t>& which, bool over_live) {
      using Of = ArrayParam::Of;
      ArrayParam run(Of::text), tool(Of::text), scope(Of::text), fingerprint(Of::text), key(Of::text),
          snapshot(Of::text), window_ms(Of::int8), ttl_ms(Of::int8), start(Of::boolean), lease_ms(Of::int8);
      for (auto i : which) {
        const auto& r = requests[i];
        run.text(r.run);
        tool.text(r.tool);
        scope.text(r.scope);
        fingerprint.text(r.fingerprint);
        key.text(r.key);
        snapshot.text(r.request_snapshot);
        window_ms.number(r.window.count());
        ttl_ms.number(r.unknown_ttl.count());
        start.flag(r.start.has_value());
        lease_ms.number(r.start ? r.start->lease.count() : 0);
      }
      // A row comes back as (scope, fingerprint, key): the first request in
      // `which` that names them is the one the statement inserted (an
      // INSERT takes unnest's rows in order, and a later one conflicts with
      // it: the same order the lock order above relies on).
      std::map<std::tuple<std::string_view, std::string_view, std::string_view>, std::size_t> request_of;
      for (auto i : which) request_of.try_emplace({requests[i].scope, requests[i].fingerprint, requests[i].key}, i);
      pqxx::result inserted_rows;
      try {
        inserted_rows = w.exec_prepared(careful || over_live ? "reserve_intents" : "reserve_intents_fresh",
                                        run.param(), tool.param(), scope.param(), fingerprint.param(), key.param(),
                                        snapshot.param(), window_ms.param(), ttl_ms.param(), start.param(),
                                        lease_ms.param(), replica);
      } catch (const pqxx::unique_violation&) {
        if (careful || over_live) throw;
        careful = refused = true;
        careful_reservations_ = careful_after_refusal;
        reservation_reruns_.fetch_add(1, std::memory_order_relaxed);
        throw Abort{errc::conflict};
      }
      for (const auto& row : inserted_rows) {
        auto const field = [&](int c) { return std::string_view(row[c].c_str(), row[c].size()); };
        auto found = request_of.find({field(1), field(2), field(3)});
        if (found == request_of.end()) throw Abort{errc::storage_failure};  // not a row this batch sent
        auto intent = read_reserved(row, requests[found->second]);
        inserted.insert(intent.id);
        auto key = std::pair{intent.scope, intent.fingerprint};
        rows.insert_or_assign(std::move(key), std::move(intent));
      }
    };
    auto conflicted = [&] {
      std::vector<std::size_t> rest;
      std::set<std::pair<std::string, std::string>> listed;
      for (auto i : live)
        if (!rows.count({requests[i].scope, requests[i].fingerprint}) &&
            listed.insert({requests[i].scope, requests[i].fingerprint}).second)
          rest.push_back(i);
      return rest;
    };
    // live is in (scope, fingerprint) order: its first request of each
    // fingerprint is the one inserted, the others are "existing" (below).
    std::vector<std::size_t> firsts;
    for (auto i : live)
      if (firsts.empty() || requests[firsts.back()].scope != requests[i].scope ||
          requests[firsts.back()].fingerprint != requests[i].fingerprint)
        firsts.push_back(i);
    insert(firsts, false);
    if (auto rest = conflicted(); !rest.empty()) {
      // A live intent whose window has passed and that holds no unresolved
      // dispatch gives its fingerprint up to the new reservation.
      auto superseded = w.exec("UPDATE intents SET superseded = true WHERE NOT superseded AND window_until <= now() "
                               "AND " + sql_state_guard({IntentState::reserved, IntentState::completed,
                                                         IntentState::denied, IntentState::retryable}) +
                               " AND (scope, fingerprint) IN (" + join(rest, pair_of) + ")")
                            .affected_rows();
      if (superseded) insert(rest, true);
      if (auto existing = conflicted(); !existing.empty())
        for (const auto& row :
             w.exec(select_intents("NOT superseded AND (scope, fingerprint) IN (" + join(existing, pair_of) + ")"))) {
          auto intent = read_intent(PgRow(row));
          auto key = std::pair{intent.scope, intent.fingerprint};
          rows[key] = std::move(intent);
        }
    }
    std::string binds;
    for (std::size_t k = 0; k < live.size(); ++k) {
      const auto& r = requests[live[k]];
      auto found = rows.find({r.scope, r.fingerprint});
      if (found == rows.end()) throw Abort{errc::conflict};  // superseded concurrently
      auto& intent = found->second;
      // The winner is the request whose key the inserted row holds; a second
      // request of this batch for the same fingerprint is "existing".
      auto const id = intent.id;
      bool won = inserted.count(id) && intent.key == r.key;
      if (won) inserted.erase(id);
      // live is in (scope, fingerprint) order: the row is moved out to the
      // last request of its fingerprint, copied to the others.
      const auto* next = k + 1 < live.size() ? &requests[live[k + 1]] : nullptr;
      bool const last = !next || next->scope != r.scope || next->fingerprint != r.fingerprint;
      auto& reservation = done[live[k]].emplace();
      reservation.outcome = won ? ReserveOutcome::reserved : ReserveOutcome::existing;
      if (last) {
        reservation.intent = std::move(intent);
      } else {
        reservation.intent = intent;
      }
      reservation.started = won && r.start.has_value();
      if (!r.agent_key.empty())
        binds += (binds.empty() ? "(" : ",(") + q(w, r.scope) + "," + q(w, r.agent_key) + "," +
                 q(w, r.fingerprint) + "," + std::to_string(id) + ")";
    }
    if (!binds.empty()) {
      w.exec("INSERT INTO agent_keys (scope, agent_key, fingerprint, intent_id) VALUES " + binds +
             " ON CONFLICT DO NOTHING");
      // A concurrent transaction may have bound one of these keys to another
      // fingerprint first: that request is a mismatch after all.
      auto after = bound_keys();
      std::string unstart;
      for (auto i : live)
        if (auto other = mismatch(after, i)) {
          // Its row must not say an attempt began: nothing will be sent.
          if (done[i] && done[i]->started)
            unstart += (unstart.empty() ? "" : ",") + std::to_string(done[i]->intent.id);
          done[i] = Reservation{ReserveOutcome::key_mismatch, load_intent(w, *other)};
        }
      if (!unstart.empty()) {
        w.exec("UPDATE intents SET state = 'reserved', attempts = 0, lease_until = NULL, replica_id = NULL "
               "WHERE id IN (" + unstart + ")");
      }
    }
    return done;
  };
  auto batch = transact(reserve);
  // Refused fresh: run it again carefully, here when what failed was this
  // call's own transaction or savepoint. In a batch without savepoints the
  // whole batch failed with errc::conflict, and the ledger runs it again
  // (Ledger::run_batch); its reservation is careful then (the store's next
  // ones are).
  if (refused && !batch && !(batch_ && batch_->together)) batch = transact(reserve);
  if (!batch) {
    for (auto& r : results) r = batch.error();
    return results;
  }
  return std::move(*batch);
}

namespace pg {

std::array<std::string, admit_alone_param_count> admit_alone_params(const AdmitRequest& a) {
  const auto& r = a.reserve;
  bool const wants = a.first_attempt && a.first_attempt->max_attempts > 0;
  return {r.run,
          std::to_string(a.budget),
          r.tool,
          r.scope,
          r.fingerprint,
          r.key,
          wants ? "true" : "false",
          std::to_string(wants ? a.first_attempt->lease.count() : 0),
          r.request_snapshot,
          std::to_string(r.window.count()),
          std::to_string(r.unknown_ttl.count()),
          wants ? a.first_attempt->replica : std::string()};
}

AdmitFirst read_admit_first(const detail::RowView& row, int columns, const ReserveRequest& request) {
  AdmitFirst out;
  if (!row.is_null(columns - 2))
    out.counted = RunCharge{ChargeOutcome::counted, row.int64(columns - 2), row.int64(columns - 1)};
  if (!row.is_null(0)) {
    out.inserted = read_intent(row);
    out.inserted->request_snapshot = request.request_snapshot;  // not sent back (admit_alone_sql)
  }
  return out;
}

bool admits_alone(const AdmitRequest& a) { return a.reserve.agent_key.empty() && valid(a.reserve) && a.budget > 0; }

}  // namespace pg

std::optional<Result<Admission>> PgStore::admit_alone(const AdmitRequest& a) {
  if (batch_ || !admits_alone(a)) return std::nullopt;
  // The run's charge, the reservation and its first attempt in one
  // statement (its own transaction: one round trip). The attempt begins only
  // when the charge counted and the reservation is fresh, as in the batch.
  auto first = transact(
      [&](pqxx::transaction_base& w) {
        auto p = admit_alone_params(a);
        auto rows = w.exec_prepared("admit_alone", p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9],
                                    p[10], p[11]);
        return read_admit_first(PgRow(rows[0]), static_cast<int>(rows[0].size()), a.reserve);
      },
      Commit::one_statement);
  if (!first) return Result<Admission>(first.error());
  return finish_admission(a, std::move(*first));
}

Result<Admission> PgStore::finish_admission(const AdmitRequest& a, AdmitFirst first) {
  bool const counted = first.counted.has_value();
  if (auto whole = whole_admission(first)) return Result<Admission>(std::move(*whole));
  const auto& r = a.reserve;
  Admission admission;
  if (first.counted) {
    admission.charge = *first.counted;
  } else {
    auto run = find_run(r.run);
    if (!run) return Result<Admission>(run.error());
    admission.charge = RunCharge{charge_refusal(*run, CallKind::write), run->calls, run->budget};
  }
  if (first.inserted) {
    admission.reservation = Reservation{ReserveOutcome::reserved, std::move(*first.inserted), false};
    admission.reservation.started = admission.reservation.intent.state == IntentState::dispatched;
  } else {
    // A live intent holds the fingerprint: the batch's reservation (read it
    // back, or supersede it if its window has passed), without the charge,
    // which counted already.
    ReserveRequest again = r;
    if (counted && a.first_attempt && a.first_attempt->max_attempts > 0)
      again.start = ReserveRequest::Start{a.first_attempt->lease, a.first_attempt->replica};
    // Careful: a fresh insert would be refused.
    careful_reservations_ = std::max(careful_reservations_, 1);
    auto reserved = std::move(reserve_intents({&again, 1}).front());
    if (!reserved) return Result<Admission>(reserved.error());
    admission.reservation = std::move(*reserved);
  }
  if (admission.reservation.started)
    admission.start = FirstStart{AttemptOutcome::started, 1};
  return Result<Admission>(std::move(admission));
}

}  // namespace idemgate::ledger
