// The operating surface's own thread: the admin listener (when admin.listen
// is set), the escalation sweeper and the webhook notifier (when
// admin.notify is set) share one io_context there, apart from the network
// threads; their ledger calls go through the same Ledger facade. The thread
// is a Worker of its own (its own upstream pool), so that the sweeper's
// background lookups reach providers without touching a network thread's
// state.
#pragma once

#include "proxy/metrics.hpp"
#include "proxy/worker.hpp"

#include <boost/asio/io_context.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

namespace idemgate::ledger {
class Ledger;
}

namespace idemgate::proxy {

class AdminListener;
class Notifier;
struct AdminContext;

class AdminServer {
 public:
  AdminServer(ConfigSource& source, ledger::Ledger& ledger, MetricsSources metrics, const TlsServices& tls,
              ReadTracker& reads);
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Before the network threads start: sets the notifier up as the ledger's
  // escalation observer and binds the admin listener. Returns "" or why the
  // process must not start (bad token file, non-loopback without a token,
  // address in use).
  std::string prepare(const config::Config& cfg);
  // Starts the thread (sweeper, notifier, listener).
  void start();
  // Stops accepting and sweeping and joins the thread; queued notifications
  // still undelivered are logged as dropped.
  void stop();

  std::uint16_t admin_port() const noexcept { return port_; }
  NotifyStats& notify_stats() noexcept { return notify_stats_; }

 private:
  ConfigSource& source_;
  ledger::Ledger& ledger_;
  MetricsSources metrics_;
  const TlsServices& tls_;
  Worker worker_;
  boost::asio::io_context& ioc_;
  std::unique_ptr<AdminContext> ctx_;
  std::unique_ptr<AdminListener> listener_;
  std::unique_ptr<Notifier> notifier_;
  NotifyStats notify_stats_;
  SweeperStats sweeper_stats_;
  std::atomic<bool> stopping_{false};
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace idemgate::proxy
