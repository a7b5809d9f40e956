// The escalation sweeper (see escalation_sweeper.hpp).
#include "proxy/escalation_sweeper.hpp"

#include "ledger/ledger.hpp"
#include "policy/reason.hpp"
#include "proxy/ids.hpp"
#include "proxy/log.hpp"
#include "proxy/problem.hpp"
#include "proxy/query_reconcile.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json.hpp>

#include <algorithm>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace json = boost::json;

using std::chrono::milliseconds;

milliseconds lookup_delay(const policy::Tool& tool) {
  auto const& r = tool.reconcile;
  auto const after = std::max(std::chrono::duration_cast<milliseconds>(r.settle),
                              std::chrono::duration_cast<milliseconds>(r.inline_budget));
  return std::min(after, std::chrono::duration_cast<milliseconds>(r.ttl));
}

namespace {

bool looked_up_in_background(const policy::Tool& tool) {
  return tool.effect != policy::Effect::read && tool.reconcile.mode == policy::ReconcileMode::query;
}

}  // namespace

milliseconds sweep_interval(const config::Config& cfg) {
  milliseconds shortest{30'000 * 4};
  for (auto const& tool : cfg.tools) {
    if (tool.effect == policy::Effect::read) continue;
    shortest = std::min(shortest, std::chrono::duration_cast<milliseconds>(tool.reconcile.ttl));
    if (looked_up_in_background(tool) && lookup_delay(tool) > milliseconds(0))
      shortest = std::min(shortest, lookup_delay(tool));
  }
  return std::clamp(shortest / 4, milliseconds(100), milliseconds(30'000));
}

namespace {

const policy::Tool* tool_named(const config::Config& cfg, const std::string& name) {
  for (auto const& tool : cfg.tools)
    if (tool.name == name) return &tool;
  return nullptr;
}

std::string package_for(const ledger::Intent& intent, const policy::Tool* tool, policy::ReasonCode reason,
                        const std::vector<ledger::Intent>& tried) {
  auto const ttl_s = intent.unknown_ttl.count() / 1000;
  Problem p;
  p.status = 422;
  p.reason_code = std::string(policy::to_string(reason));
  p.title = "Refused: " + p.reason_code;
  p.detail = "the outcome of " + intent.tool + " is still unknown " + std::to_string(ttl_s) +
             "s (reconcile.ttl) after the attempt was sent, and reconciliation did not settle it; "
             "idemgate will not re-send it until a human decides";
  auto& x = p.extra;
  x["terminal"] = "escalate";
  x["question_for_human"] = policy::question_for_human(reason);
  x["tool"] = intent.tool;
  x["run"] = intent.run;
  x["fingerprint"] = intent.fingerprint;
  x["idempotency_key"] = intent.key;
  x["attempts"] = intent.attempts;
  x["bound"] = tool ? tool->retry.bound : 0;
  x["intent"] = intent.id;
  if (!intent.receipt.empty()) x["receipt"] = intent.receipt;
  x["trace_id"] = random_hex(16);
  x["escalated_by"] = "sweeper";
  x["unknown_ttl_s"] = ttl_s;
  if (intent.recovered) x["recovered"] = true;
  json::array tools;
  for (auto const& i : tried)
    tools.push_back(json::object{{"name", i.tool}, {"fingerprint", i.fingerprint}, {"class", i.answer_class}});
  x["tools_tried"] = std::move(tools);
  x["error"] = json::object{{"type", "idemgate_error"}, {"code", p.reason_code}, {"message", p.detail}};
  return problem_json(p);
}

// The write's request body as the ledger holds it (redacted), for the
// query URL's {/json/pointer} placeholders; null when it was not JSON.
const json::value* snapshot_body(const json::value& snapshot) {
  auto const* o = snapshot.if_object();
  auto const* body = o ? o->if_contains("body") : nullptr;
  return body && (body->is_object() || body->is_array()) ? body : nullptr;
}

char const* outcome_name(policy::QueryOutcome outcome) {
  switch (outcome) {
    case policy::QueryOutcome::found: return "found";
    case policy::QueryOutcome::not_found: return "not_found";
    case policy::QueryOutcome::failed: break;
  }
  return "failed";
}

Task<void> look_up_in_background(ledger::Ledger& ledger, const config::Config& cfg, Worker& worker,
                                            SweeperStats& stats, const policy::Tool& tool,
                                            const ledger::Intent& intent) {
  boost::system::error_code ec;
  auto const snapshot = ledger::parse_snapshot(intent.request_snapshot, ec);
  // No agent: idemgate keeps no credentials to send along. Not counted in
  // limits.guarded_budget: the sweeper makes one lookup at a time.
  Lookup lookup{tool, intent.key, intent.receipt, ec ? nullptr : snapshot_body(snapshot), nullptr, {}, nullptr};
  auto result = co_await ask_provider(lookup, cfg, worker);
  stats.lookups.fetch_add(1, std::memory_order_relaxed);
  json::object line{{"intent", intent.id}, {"run", intent.run}, {"tool", intent.tool},
                    {"outcome", outcome_name(result.outcome)}};
  if (result.outcome == policy::QueryOutcome::found) {
    auto settled = found_outcome(tool, intent.id, result.found_json);
    auto const receipt = settled.receipt;
    auto recorded = co_await ledger.record_outcome(std::move(settled));
    // Not recorded: an agent's retry settled or re-sent it meanwhile, which
    // stands; or the ledger failed, and the ttl escalation asks a human.
    line["settled"] = recorded.has_value();
    if (recorded) {
      stats.settled.fetch_add(1, std::memory_order_relaxed);
      line["receipt"] = receipt;
    }
  }
  log_event("looked_up_unknown", std::move(line));
}

// Every lookup due now, claimed in batches until none is left, so that the
// escalations that follow never overtake a lookup of the same pass.
Task<bool> look_up_due(ledger::Ledger& ledger, const config::Config& cfg, Worker& worker,
                                  SweeperStats& stats) {
  std::vector<ledger::LookupDue> due;
  for (auto const& tool : cfg.tools)
    if (looked_up_in_background(tool)) due.push_back({tool.name, lookup_delay(tool)});
  if (due.empty()) co_return true;
  constexpr int batch = 50;
  for (;;) {
    auto tools = due;  // named: GCC 12 destroys temporaries of a co_await expression twice
    auto claimed = co_await ledger.claim_lookups(std::move(tools), batch);
    if (!claimed) co_return false;
    for (auto const& intent : *claimed) {
      auto const* tool = tool_named(cfg, intent.tool);
      if (tool) co_await look_up_in_background(ledger, cfg, worker, stats, *tool, intent);
    }
    if (claimed->size() < static_cast<std::size_t>(batch)) co_return true;
  }
}

}  // namespace

Task<int> sweep_unknowns_once(ledger::Ledger& ledger, const config::Config& cfg, Worker& worker,
                                         SweeperStats& stats) {
  if (!co_await look_up_due(ledger, cfg, worker, stats)) co_return -1;
  auto due = co_await ledger.list_unescalated_unknowns(100);
  if (!due) co_return -1;
  stats.passes.fetch_add(1, std::memory_order_relaxed);
  int escalated = 0;
  for (auto const& intent : *due) {
    auto const* tool = tool_named(cfg, intent.tool);
    // Its lookup came due with its ttl and is the next pass's: a human is
    // asked only once the provider has been.
    if (tool && looked_up_in_background(*tool) && !intent.looked_up_at) continue;
    // A tool no longer configured is escalated as money when unsure: the
    // stricter question costs a human a minute, the other a double charge.
    bool const money = !tool || tool->effect == policy::Effect::money;
    auto const reason = money ? policy::ReasonCode::money_unknown : policy::ReasonCode::tool_outcome_unknown;
    std::string run = intent.run;
    auto tried = co_await ledger.list_intents_by_run(std::move(run), 20);
    ledger::EscalationRequest request;
    request.run = intent.run;
    request.intent_id = intent.id;
    request.reason_code = std::string(policy::to_string(reason));
    request.package_json = package_for(intent, tool, reason, tried ? *tried : std::vector<ledger::Intent>{});
    auto id = co_await ledger.persist_escalation(std::move(request));
    if (!id) co_return escalated ? escalated : -1;
    ++escalated;
    stats.escalated.fetch_add(1, std::memory_order_relaxed);
    log_event("escalated_unknown", {{"escalation_id", *id},
                                    {"intent", intent.id},
                                    {"run", intent.run},
                                    {"tool", intent.tool},
                                    {"reason_code", policy::to_string(reason)}});
  }
  co_return escalated;
}

Task<void> sweep_unknowns(ledger::Ledger& ledger, ConfigSource& source, Worker& worker,
                                     SweeperStats& stats, const std::atomic<bool>& stopping) {
  SteadyTimer timer(co_await asio::this_coro::executor);
  while (!stopping.load(std::memory_order_relaxed)) {
    auto cfg = source.get();
    timer.expires_after(sweep_interval(*cfg));
    auto [ec] = co_await timer.async_wait(asio::as_tuple(use_task));
    if (ec || stopping.load(std::memory_order_relaxed)) co_return;
    auto const now = source.get();  // the config at this pass, kept for all of it
    co_await sweep_unknowns_once(ledger, *now, worker, stats);
  }
}

}  // namespace idemgate::proxy
