// The escalation sweeper (see escalation_sweeper.hpp).
#include "proxy/escalation_sweeper.hpp"

#include "ledger/ledger.hpp"
#include "policy/reason.hpp"
#include "proxy/ids.hpp"
#include "proxy/log.hpp"
#include "proxy/problem.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <algorithm>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace json = boost::json;

std::chrono::milliseconds sweep_interval(const config::Config& cfg) {
  std::chrono::milliseconds shortest{30'000 * 4};
  for (auto const& tool : cfg.tools)
    if (tool.effect != policy::Effect::read)
      shortest = std::min(shortest, std::chrono::duration_cast<std::chrono::milliseconds>(tool.reconcile.ttl));
  return std::clamp(shortest / 4, std::chrono::milliseconds(100), std::chrono::milliseconds(30'000));
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

}  // namespace

asio::awaitable<int> sweep_unknowns_once(ledger::Ledger& ledger, const config::Config& cfg, SweeperStats& stats) {
  auto due = co_await ledger.list_unescalated_unknowns(100);
  if (!due) co_return -1;
  stats.passes.fetch_add(1, std::memory_order_relaxed);
  int escalated = 0;
  for (auto const& intent : *due) {
    auto const* tool = tool_named(cfg, intent.tool);
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

asio::awaitable<void> sweep_unknowns(ledger::Ledger& ledger, ConfigSource& source, SweeperStats& stats,
                                     const std::atomic<bool>& stopping) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!stopping.load(std::memory_order_relaxed)) {
    auto cfg = source.get();
    timer.expires_after(sweep_interval(*cfg));
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec || stopping.load(std::memory_order_relaxed)) co_return;
    co_await sweep_unknowns_once(ledger, *source.get(), stats);
  }
}

}  // namespace idemgate::proxy
