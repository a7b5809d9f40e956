// A network thread's state (see worker.hpp).
#include "proxy/worker.hpp"

#include <vector>

namespace idemgate::proxy {

Worker::Worker(ConfigSource& config, unsigned index, ledger::Ledger* ledger, ReadTracker& reads,
               const TlsServices& tls)
    : config_(config),
      index_(index),
      pool_(config.get()->limits.upstream_pool, config.get()->timeouts.idle),
      ledger_(ledger),
      reads_(reads),
      tls_(tls) {}

void Worker::begin_drain() {
  draining_ = true;
  pool_.clear();
  // close_if_idle() may end a session, which removes it from the set.
  std::vector<Drainable*> snapshot(sessions_.begin(), sessions_.end());
  for (auto* s : snapshot) s->close_if_idle();
}

}  // namespace idemgate::proxy
