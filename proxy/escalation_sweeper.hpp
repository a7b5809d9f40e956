// The escalation sweeper: an unknown intent whose reconcile.ttl ran out
// becomes a money_unknown (money tools) or tool_outcome_unknown escalation
// on its own, without waiting for an agent to come back, at most once per
// intent (Ledger::list_unescalated_unknowns leaves out the intents that
// already have one). The package is the same problem+json a refusal
// carries, persisted through Ledger::persist_escalation (so the webhook
// hears of it too).
#pragma once

#include "proxy/metrics.hpp"
#include "proxy/worker.hpp"

#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <chrono>

namespace idemgate::ledger {
class Ledger;
}

namespace idemgate::proxy {

// How often to look: a quarter of the shortest reconcile.ttl of the
// config's write tools, between 100 ms and 30 s.
std::chrono::milliseconds sweep_interval(const config::Config& cfg);

// One pass: escalates what is due; returns how many escalations it wrote
// (-1 when the ledger could not be read).
boost::asio::awaitable<int> sweep_unknowns_once(ledger::Ledger& ledger, const config::Config& cfg,
                                                SweeperStats& stats);

// Sweeps until stopping is set (checked after each pause).
boost::asio::awaitable<void> sweep_unknowns(ledger::Ledger& ledger, ConfigSource& source, SweeperStats& stats,
                                            const std::atomic<bool>& stopping);

}  // namespace idemgate::proxy
