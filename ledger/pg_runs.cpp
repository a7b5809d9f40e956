// PgStore's runs (see store.hpp): calls charged against a run's budget, and
// the run's state (active, frozen, killed).
#include "ledger/pg_store.hpp"

#include "ledger/pg_support.hpp"

#include <map>

namespace idemgate::ledger {

namespace {

// A row of (run_id, state, calls, budget, reason).
Run read_run(const PgRow& r) {
  return Run{r.text(0), parse_run_state(r.text(1)).value_or(RunState::killed), r.int64(2), r.int64(3), r.text(4)};
}

std::optional<Run> load_run(pqxx::transaction_base& w, const std::string& run) {
  auto rows = w.exec("SELECT run_id, state, calls, budget, reason FROM runs WHERE run_id = " +
                     q(w, run));
  if (rows.empty()) return std::nullopt;
  return read_run(PgRow(rows[0]));
}

}  // namespace

Result<RunCharge> PgStore::count_call(const std::string& run, std::int64_t budget, CallKind kind) {
  return transact([&](pqxx::transaction_base& w) {
    auto id = q(w, run);
    auto open = std::string("runs.calls < runs.budget AND (runs.state = 'active'") +
                (kind == CallKind::read ? " OR runs.state = 'frozen')" : ")");
    if (budget > 0) {
      // One round trip when the call counts: a new run is created with this
      // call counted, a known one counted if it is open and under budget.
      auto counted = w.exec("INSERT INTO runs (run_id, budget, calls) VALUES (" + id + ", " + std::to_string(budget) +
                            ", 1) ON CONFLICT (run_id) DO UPDATE SET calls = runs.calls + 1, updated_at = now() "
                            "WHERE " + open + " RETURNING calls, budget");
      if (!counted.empty())
        return RunCharge{ChargeOutcome::counted, counted[0][0].as<long long>(), counted[0][1].as<long long>()};
      auto current = *load_run(w, run);
      return RunCharge{charge_refusal(current, kind), current.calls, current.budget};
    }
    w.exec("INSERT INTO runs (run_id, budget) VALUES (" + id + ", " + std::to_string(budget) +
           ") ON CONFLICT (run_id) DO NOTHING");
    auto counted = w.exec(std::string("UPDATE runs SET calls = calls + 1, updated_at = now() "
                                      "WHERE run_id = ") + id +
                          " AND calls < budget AND (state = 'active'" +
                          (kind == CallKind::read ? " OR state = 'frozen')" : ")"))
                       .affected_rows();
    auto current = *load_run(w, run);
    return RunCharge{counted ? ChargeOutcome::counted : charge_refusal(current, kind),
                     current.calls, current.budget};
  });
}

std::vector<Result<RunCharge>> PgStore::count_calls(std::span<const ChargeRequest> requests) {
  if (requests.size() == 1) return {count_call(requests.front().run, requests.front().budget, requests.front().kind)};
  std::vector<Result<RunCharge>> results(requests.size(), error_code(errc::invalid_argument));
  auto batch = transact([&](pqxx::transaction_base& w) {
    // Every run of the batch locked once, in run id order, and counted in
    // one UPDATE: a run's row is taken once per batch, not once per call.
    std::map<std::string, std::int64_t> budgets;
    for (const auto& r : requests) budgets.emplace(r.run, r.budget);
    ArrayParam ids(ArrayParam::Of::text), limits(ArrayParam::Of::int8);
    for (const auto& [run, budget] : budgets) {
      ids.text(run);
      limits.number(budget);
    }
    // Created if missing and locked, in run id order, by one statement.
    std::map<std::string, Run> runs;
    for (const auto& row : w.exec_prepared("runs_take", ids.param(), limits.param())) {
      auto run = read_run(PgRow(row));
      auto id = run.id;
      runs[id] = std::move(run);
    }
    std::map<std::string, std::int64_t> added;
    std::vector<Result<RunCharge>> done;
    for (const auto& r : requests) {
      auto& run = runs.at(r.run);
      bool const open = run.state == RunState::active || (run.state == RunState::frozen && r.kind == CallKind::read);
      if (open && run.calls < run.budget) {
        ++run.calls;
        ++added[r.run];
        done.emplace_back(RunCharge{ChargeOutcome::counted, run.calls, run.budget});
      } else {
        done.emplace_back(RunCharge{charge_refusal(run, r.kind), run.calls, run.budget});
      }
    }
    ArrayParam counted(ArrayParam::Of::text), counts(ArrayParam::Of::int8);
    for (const auto& [run, n] : added) {
      counted.text(run);
      counts.number(n);
    }
    if (!added.empty()) w.exec_prepared("runs_add", counted.param(), counts.param());
    return done;
  });
  if (!batch) {
    for (auto& r : results) r = batch.error();
    return results;
  }
  return std::move(*batch);
}

Result<Run> PgStore::find_run(const std::string& run) {
  return transact([&](pqxx::transaction_base& w) {
    auto found = load_run(w, run);
    if (!found) throw Abort{errc::not_found};
    return *found;
  });
}

Result<Run> PgStore::set_run_state(const std::string& run, RunState state,
                                   const std::string& reason) {
  return transact([&](pqxx::transaction_base& w) {
    auto target = q(w, to_string(state));
    // The guard is the rule: a killed run never comes back.
    auto changed = w.exec("UPDATE runs SET state = " + target + ", reason = " + q(w, reason) +
                          ", updated_at = now() WHERE run_id = " + q(w, run) +
                          " AND (state <> 'killed' OR " + target + " = 'killed')")
                       .affected_rows();
    auto current = load_run(w, run);
    if (!current) throw Abort{errc::not_found};
    if (changed == 0 || !run_transition_allowed(current->state, state))
      throw Abort{errc::illegal_transition};
    return *current;
  });
}

}  // namespace idemgate::ledger
