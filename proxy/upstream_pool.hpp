// Idle keep-alive connections to upstreams, one pool per network thread (so
// no locks), bounded per scheme://host:port. A connection the upstream has closed
// while idle is dropped on take(), never handed out.
#pragma once

#include "proxy/stream.hpp"
#include "ledger/executor.hpp"

#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace idemgate::proxy {

struct UpstreamConnection {
  explicit UpstreamConnection(Executor ex) : stream(std::move(ex)) {}

  ProxyStream stream;  // TLS for https:// upstreams
  boost::beast::flat_buffer buffer;
  std::string head;  // a rendered request or answer header; its capacity is kept for the next one
  std::chrono::steady_clock::time_point idle_since{};
  std::uint64_t requests = 0;  // requests carried so far; > 0 means reused
  // How long the upstream said it keeps the connection open while idle
  // (Keep-Alive: timeout=N on its last answer); zero when it did not say.
  std::chrono::steady_clock::duration keep_alive_timeout{};
};

// What a caller may be handed. A guarded write sent on a connection the
// upstream is closing at that moment is an unknown outcome, so writes take
// only a connection whose upstream-announced idle timeout is far off.
enum class Reuse {
  any,          // any connection that is still open
  known_alive,  // idle for at most half its Keep-Alive timeout
};

struct UpstreamPoolStats {
  std::uint64_t reused = 0;
  std::uint64_t dropped_stale = 0;
  std::uint64_t dropped_full = 0;
  std::uint64_t passed_over = 0;  // idle ones a known_alive take did not trust
};

class UpstreamPool {
public:
  UpstreamPool(std::size_t max_idle_per_key, std::chrono::steady_clock::duration idle_ttl);

  // An idle connection for key ("scheme://host:port"), or null. Connections
  // that do not qualify for `reuse` stay pooled for other callers.
  std::unique_ptr<UpstreamConnection> take(const std::string& key, Reuse reuse = Reuse::any);

  // Keeps c for reuse. The connections for key idle for idle_ttl are closed
  // first, and when max_idle_per_key are still idle the oldest of them.
  void give_back(const std::string& key, std::unique_ptr<UpstreamConnection> c);

  // Closes every connection idle for idle_ttl, whichever upstream it is
  // for (give_back does so only for the upstream coming back).
  void prune();
  std::chrono::steady_clock::duration idle_ttl() const noexcept { return idle_ttl_; }

  void clear();
  std::size_t idle_count() const noexcept;
  const UpstreamPoolStats& stats() const noexcept { return stats_; }

private:
  // Closes the connections in list idle for idle_ttl.
  void drop_stale(std::vector<std::unique_ptr<UpstreamConnection>>& list, std::chrono::steady_clock::time_point now);

  std::size_t max_idle_per_key_;
  std::chrono::steady_clock::duration idle_ttl_;
  std::unordered_map<std::string, std::vector<std::unique_ptr<UpstreamConnection>>> idle_;
  UpstreamPoolStats stats_;
};

}  // namespace idemgate::proxy
