// A network thread's world: its io_context, its upstream pool and the
// sessions it serves, plus the config snapshot source every thread shares.
// Everything but ConfigSource is touched only from the worker's own thread.
#pragma once

#include "config/config.hpp"
#include "ledger/latency_histogram.hpp"
#include "proxy/decision_stats.hpp"
#include "proxy/read_tracker.hpp"
#include "proxy/upstream_pool.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_set>

namespace idemgate::ledger {
class Ledger;
}
namespace idemgate::tls {
class LeafMinter;
}
namespace boost::asio::ssl {
class context;
}

namespace idemgate::proxy {

// The current immutable configuration; reload swaps the pointer and every
// request keeps the snapshot it started with.
class ConfigSource {
public:
  explicit ConfigSource(std::shared_ptr<const config::Config> initial) : current_(std::move(initial)) {}
  std::shared_ptr<const config::Config> get() const { return current_.load(std::memory_order_acquire); }
  void set(std::shared_ptr<const config::Config> next) { current_.store(std::move(next), std::memory_order_release); }

private:
  std::atomic<std::shared_ptr<const config::Config>> current_;
};

class Drainable {
public:
  virtual void close_if_idle() = 0;
  // The worker's sweep, about once a second: a connection waiting idle with
  // its read buffer since `before` or earlier gives the buffer back.
  virtual void release_if_quiet(std::chrono::steady_clock::time_point before) = 0;

protected:
  ~Drainable() = default;
};

// The process's TLS state, built once at start-up (it reads files) and shared
// by every network thread: the verifying client context for https://
// upstreams and, with tls.intercept, the leaf minter for agents' CONNECTs.
struct TlsServices {
  std::shared_ptr<boost::asio::ssl::context> client;
  std::shared_ptr<tls::LeafMinter> minter;  // null unless tls.intercept was on at start
};

// Counters for /metrics: written on the worker's thread, read (relaxed) by
// the admin listener's.
struct WorkerStats {
  std::atomic<std::uint64_t> connections{0};
  std::atomic<std::uint64_t> connections_closed{0};
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> tunnels{0};
  std::atomic<std::uint64_t> problems{0};
  std::atomic<std::uint64_t> upstream_connects{0};
  std::atomic<std::uint64_t> egress_denied{0};
  std::atomic<std::uint64_t> intercepted{0};
  // Guarded answers buffered short of limits.guarded_answer because
  // limits.guarded_budget had no more room (the rest streamed on).
  std::atomic<std::uint64_t> answers_cut_by_budget{0};
  // Idle client connections waiting with their read buffer (a gauge).
  std::atomic<std::uint64_t> idle_buffered{0};
  // A guarded exchange with an upstream, from connect to the complete answer.
  ledger::LatencyHistogram upstream_latency;
};

class Worker {
public:
  Worker(ConfigSource& config, unsigned index, ledger::Ledger* ledger, ReadTracker& reads,
         const TlsServices& tls);

  boost::asio::io_context& context() noexcept { return ioc_; }
  ConfigSource& config() noexcept { return config_; }
  UpstreamPool& pool() noexcept { return pool_; }
  // Pools an upstream connection for reuse (UpstreamPool::give_back); idle
  // ones are closed within twice timeouts.idle, traffic or not.
  void give_back(const std::string& pool_key, std::unique_ptr<UpstreamConnection> c);
  WorkerStats& stats() noexcept { return stats_; }
  DecisionStats& decisions() noexcept { return decisions_; }
  ledger::Ledger* ledger() noexcept { return ledger_; }
  ReadTracker& reads() noexcept { return reads_; }
  const TlsServices& tls() const noexcept { return tls_; }
  unsigned index() const noexcept { return index_; }

  bool draining() const noexcept { return draining_; }
  void add(Drainable* s) { sessions_.insert(s); }
  void remove(Drainable* s) {
    if (sessions_.erase(s)) stats_.connections_closed.fetch_add(1, std::memory_order_relaxed);
  }
  std::size_t active_sessions() const noexcept { return sessions_.size(); }

  // On this worker's thread: closes idle connections and makes busy ones
  // close after their current request.
  void begin_drain();
  // A session begins an idle wait that holds its read buffer (counted in
  // stats().idle_buffered): the sweep runs while any such wait does.
  void idle_buffer_held();

private:
  void sweep(boost::system::error_code ec);
  void arm_pool_sweep();
  void prune_pool(boost::system::error_code ec);

  // Declared before ioc_, so destroyed after it: destroying the context
  // destroys the frames of sessions still suspended in it (the threads
  // stopped when a drain ran out of time), and each session's destructor
  // leaves sessions_ and counts itself in stats_.
  WorkerStats stats_;
  DecisionStats decisions_;
  std::unordered_set<Drainable*> sessions_;
  // One thread runs this context, and every socket, acceptor and timer on it
  // is used from that thread alone (drain and the acceptor's close are
  // posted to it). So the reactor takes no lock per descriptor per operation
  // (10% of the CPU a pass-through request costs idemgate); the scheduler
  // keeps its lock, because the ledger's threads post completions into it.
  boost::asio::io_context ioc_{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  ConfigSource& config_;
  unsigned index_;
  UpstreamPool pool_;
  ledger::Ledger* ledger_;
  ReadTracker& reads_;
  const TlsServices& tls_;
  bool draining_ = false;
  SteadyTimer sweep_{ioc_};
  bool sweep_armed_ = false;
  SteadyTimer pool_sweep_{ioc_};
  bool pool_sweep_armed_ = false;
};

}  // namespace idemgate::proxy
