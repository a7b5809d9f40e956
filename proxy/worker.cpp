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

namespace {
// How long an idle connection keeps its read buffer: a connection in use
// reads its next request straight into it (no readiness wait to register
// with the reactor, no allocation); one quiet for this long waits without.
constexpr auto idle_buffer_quiet = std::chrono::seconds(1);
}  // namespace

void Worker::idle_buffer_held() {
  if (sweep_armed_ || draining_) return;
  sweep_armed_ = true;
  sweep_.expires_after(idle_buffer_quiet);
  sweep_.async_wait([this](boost::system::error_code ec) { sweep(ec); });
}

void Worker::sweep(boost::system::error_code ec) {
  sweep_armed_ = false;
  if (ec || draining_) return;
  // release_if_quiet() only cancels a read: no session ends inside the loop.
  auto const before = std::chrono::steady_clock::now() - idle_buffer_quiet;
  for (auto* s : sessions_) s->release_if_quiet(before);
  // A wait begun within the last second is still counted: come back for it.
  if (stats_.idle_buffered.load(std::memory_order_relaxed) != 0) idle_buffer_held();
}

void Worker::give_back(const std::string& pool_key, std::unique_ptr<UpstreamConnection> c) {
  pool_.give_back(pool_key, std::move(c));
  arm_pool_sweep();
}

void Worker::arm_pool_sweep() {
  if (pool_sweep_armed_ || draining_ || pool_.idle_count() == 0) return;
  pool_sweep_armed_ = true;
  pool_sweep_.expires_after(pool_.idle_ttl());
  pool_sweep_.async_wait([this](boost::system::error_code ec) { prune_pool(ec); });
}

void Worker::prune_pool(boost::system::error_code ec) {
  pool_sweep_armed_ = false;
  if (ec || draining_) return;
  // Connections to an upstream that gets no more traffic would otherwise
  // stay open (and past the upstream's own timeout, half-closed) for good.
  pool_.prune();
  arm_pool_sweep();
}

void Worker::begin_drain() {
  draining_ = true;
  sweep_.cancel();  // a pending sweep would keep the context's run() from returning
  pool_sweep_.cancel();
  pool_.clear();
  // close_if_idle() may end a session, which removes it from the set.
  std::vector<Drainable*> snapshot(sessions_.begin(), sessions_.end());
  for (auto* s : snapshot) s->close_if_idle();
}

}  // namespace idemgate::proxy
