// The escalation sweeper: an unknown intent whose reconcile.ttl ran out
// becomes a money_unknown (money tools) or tool_outcome_unknown escalation
// on its own, without waiting for an agent to come back, at most once per
// intent (Ledger::list_unescalated_unknowns leaves out the intents that
// already have one). The package is the same problem+json a refusal
// carries, persisted through Ledger::persist_escalation (so the webhook
// hears of it too).
//
// Before that, a query-mode tool's unknown is looked up once in the
// background (ask_provider, from the ledger's row: key, receipt, redacted
// request body; no credentials, idemgate keeps none), once it has been
// unknown for max(reconcile.settle, reconcile.inline), or at its ttl if that
// comes first: by then the agent's own request has stopped reconciling and
// a "not found" means something. Found: the intent is settled as completed
// with the receipt (the next retry replays it) and no escalation is opened
// (one opened meanwhile by another replica is closed by idemgate). Not found
// or no answer: it stays unknown, and is escalated at its ttl. Each intent is
// claimed for its lookup once in the ledger (Ledger::claim_lookups), across
// replicas and restarts.
#pragma once

#include "proxy/metrics.hpp"
#include "proxy/worker.hpp"
#include "ledger/executor.hpp"

#include <atomic>
#include <chrono>

namespace idemgate::ledger {
class Ledger;
}

namespace idemgate::proxy {

// How often to look: a quarter of the shortest reconcile.ttl (or, for
// query-mode tools, time to the background lookup) of the config's write
// tools, between 100 ms and 30 s.
std::chrono::milliseconds sweep_interval(const config::Config& cfg);

// When a query-mode tool's unknown is looked up in the background, counted
// from unknown_since: max(settle, inline), at most ttl.
std::chrono::milliseconds lookup_delay(const policy::Tool& tool);

// One pass: the background lookups that are due (on worker's thread, which
// must be the caller's), then the escalations; returns how many escalations
// it wrote (-1 when the ledger could not be read).
Task<int> sweep_unknowns_once(ledger::Ledger& ledger, const config::Config& cfg, Worker& worker,
                                                SweeperStats& stats);

// Sweeps until stopping is set (checked after each pause).
Task<void> sweep_unknowns(ledger::Ledger& ledger, ConfigSource& source, Worker& worker,
                                            SweeperStats& stats, const std::atomic<bool>& stopping);

}  // namespace idemgate::proxy
