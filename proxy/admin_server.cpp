// The operating surface's thread (see admin_server.hpp).
#include "proxy/admin_server.hpp"

#include "ledger/ledger.hpp"
#include "proxy/admin_listener.hpp"
#include "proxy/escalation_sweeper.hpp"
#include "proxy/log.hpp"
#include "proxy/notifier.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;

AdminServer::AdminServer(ConfigSource& source, ledger::Ledger& ledger, MetricsSources metrics, const TlsServices& tls,
                         ReadTracker& reads)
    : source_(source),
      ledger_(ledger),
      metrics_(std::move(metrics)),
      tls_(tls),
      worker_(source, static_cast<unsigned>(metrics_.workers.size()), &ledger, reads, tls),
      ioc_(worker_.context()) {}

AdminServer::~AdminServer() { stop(); }

std::string AdminServer::prepare(const config::Config& cfg) {
  metrics_.sweeper = &sweeper_stats_;
  if (!cfg.admin.notify.url.empty()) {
    notifier_ = std::make_unique<Notifier>(ioc_, cfg.admin.notify, tls_.client, notify_stats_);
    metrics_.notify = &notify_stats_;
    ledger_.observe_escalations(
        [n = notifier_.get()](std::int64_t id, const ledger::EscalationRequest& r) { n->enqueue(id, r); });
  }
  if (!cfg.admin.enabled) return {};
  std::string error;
  auto auth = AdminAuth::load(cfg.admin, error);
  if (!error.empty()) return error;
  ctx_ = std::unique_ptr<AdminContext>(new AdminContext{ledger_, std::move(auth), metrics_});
  boost::system::error_code ec;
  auto const address = asio::ip::make_address(cfg.admin.listen.host, ec);
  if (ec) return "admin.listen host must be an IP address: " + cfg.admin.listen.host;
  try {
    listener_ = std::make_unique<AdminListener>(ioc_, asio::ip::tcp::endpoint(address, cfg.admin.listen.port), *ctx_);
  } catch (const boost::system::system_error& e) {
    return "cannot listen on admin.listen " + cfg.admin.listen.host + ":" + std::to_string(cfg.admin.listen.port) +
           ": " + e.code().message();
  }
  port_ = listener_->port();
  return {};
}

void AdminServer::start() {
  if (listener_) {
    listener_->start();
    log_event("admin_listening", {{"address", source_.get()->admin.listen.host},
                                  {"port", port_},
                                  {"token", ctx_->auth.has_token()}});
  }
  if (notifier_) notifier_->start();
  asio::co_spawn(ioc_, sweep_unknowns(ledger_, source_, worker_, sweeper_stats_, stopping_),
                 [](std::exception_ptr e) { log_exception("escalation sweeper", e); });
  thread_ = std::thread([this] {
    auto guard = asio::make_work_guard(ioc_);
    for (;;) {
      try {
        ioc_.run();
        break;
      } catch (const std::exception& e) {
        log_event("internal_error", {{"where", "admin thread"}, {"error", e.what()}});
      }
    }
  });
}

void AdminServer::stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  asio::post(ioc_, [this] {
    if (listener_) listener_->stop();
    if (notifier_) notifier_->stop();
  });
  // Sessions and the sweeper's pause end with the io_context.
  asio::post(ioc_, [this] { ioc_.stop(); });
  thread_.join();
}

}  // namespace idemgate::proxy
