// /metrics in the Prometheus text exposition format (version 0.0.4): every
// component's counters struct rendered with base units (_seconds, _total)
// and bounded label sets.
#pragma once

#include "ledger/types.hpp"

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace idemgate::ledger {
class Ledger;
}
namespace idemgate::tls {
class LeafMinter;
}

namespace idemgate::proxy {

class Worker;

// The process's own counters (the rest live with their component).
struct ServerStats {
  std::atomic<std::uint64_t> config_reloads{0};
  std::atomic<std::uint64_t> config_reload_failures{0};
  std::atomic<std::uint64_t> lease_sweep_failures{0};  // sweeps of expired leases that failed
};

// The escalation webhook's counters.
struct NotifyStats {
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<std::uint64_t> attempts_failed{0};  // one failed POST (retried later)
  std::atomic<std::uint64_t> dropped{0};          // given up after the last retry, or the queue was full
  std::atomic<std::uint64_t> queued{0};           // a gauge: waiting for delivery now
};

// The escalation sweeper's counters.
struct SweeperStats {
  std::atomic<std::uint64_t> passes{0};     // sweeps that read the ledger
  std::atomic<std::uint64_t> escalated{0};  // unknowns it escalated
  std::atomic<std::uint64_t> lookups{0};    // background lookups of query-mode unknowns
  std::atomic<std::uint64_t> settled{0};    // of those, found: the intent settled as completed
};

struct MetricsSources {
  std::vector<Worker*> workers;
  ledger::Ledger* ledger = nullptr;
  const tls::LeafMinter* minter = nullptr;  // null without tls.intercept
  const ServerStats* server = nullptr;
  const NotifyStats* notify = nullptr;      // null without admin.notify
  const SweeperStats* sweeper = nullptr;
  std::string_view version;
};

// signals: the ledger's view of escalations and unknowns, or null when the
// ledger could not be read for this scrape (idemgate_ledger_up 0).
std::string render_metrics(const MetricsSources& sources, const ledger::Signals* signals);

}  // namespace idemgate::proxy
