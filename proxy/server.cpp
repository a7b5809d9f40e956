// Threads, acceptors, signals, drain and reload (see server.hpp).
#include "proxy/server.hpp"

#include "config/warnings.hpp"
#include "ledger/ledger.hpp"
#include "ledger/open_store.hpp"
#include "proxy/admin_server.hpp"
#include "proxy/ids.hpp"
#include "proxy/listener.hpp"
#include "proxy/log.hpp"
#include "proxy/worker.hpp"
#include "tls/ca.hpp"
#include "tls/client_context.hpp"
#include "tls/leaf_minter.hpp"
#include "tls/secret_file.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <functional>
#include <thread>

#include <unistd.h>

#ifndef IDEMGATE_VERSION
#define IDEMGATE_VERSION "0.0.0"
#endif

namespace idemgate::proxy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// Which process this is, recorded on every attempt it begins:
// IDEMGATE_REPLICA_ID, else host, pid and a start nonce, so that two
// processes (a rolling restart's old and new, two replicas on one host) never
// share an identity. Attempts are owned by their lease, not by this id.
std::string replica_id() {
  if (char const* id = std::getenv("IDEMGATE_REPLICA_ID"); id && *id) return id;
  char host[256] = {};
  std::string name = ::gethostname(host, sizeof host - 1) == 0 && host[0] ? host : "replica";
  return name + "-" + std::to_string(::getpid()) + "-" + random_hex(4);
}

void write_port_file(const std::string& path, std::uint16_t port) {
  if (path.empty()) return;
  std::string const tmp = path + ".tmp";
  { std::ofstream(tmp) << port << "\n"; }
  std::rename(tmp.c_str(), path.c_str());
}

// postgresql://user:password@host/db -> postgresql://user:***@host/db
std::string redacted_url(const std::string& url) {
  auto scheme = url.find("://");
  auto at = url.find('@');
  if (scheme == std::string::npos || at == std::string::npos || at < scheme) return url;
  auto colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

// A process that died mid-dispatch (or lost the answer) leaves its attempt
// dispatched; once the attempt's own lease (the dispatching process's
// deadlines, recorded with it) has passed, it becomes unknown and the next
// retry reconciles it. A live lease is never touched. Swept every second,
// any process's attempts. A sweep that fails recovers nothing until one
// succeeds: counted, and logged when the failures start and then at most
// once a minute (with how many failed since the last line), and when sweeps
// succeed again.
Task<void> sweep_expired_leases(ledger::Ledger& ledger, const bool& draining, ServerStats& stats) {
  SteadyTimer timer(co_await asio::this_coro::executor);
  std::uint64_t failed = 0, unlogged = 0;
  std::chrono::steady_clock::time_point logged{};
  for (;;) {
    timer.expires_after(std::chrono::seconds(1));
    auto [ec] = co_await timer.async_wait(asio::as_tuple(use_task));
    if (ec || draining) co_return;
    auto recovered = co_await ledger.recover_expired();
    if (!recovered) {
      stats.lease_sweep_failures.fetch_add(1, std::memory_order_relaxed);
      ++failed;
      ++unlogged;
      auto const now = std::chrono::steady_clock::now();
      if (failed == 1 || now - logged >= std::chrono::minutes(1)) {
        log_event("lease_sweep_failed", {{"error", recovered.error().message()}, {"failures", unlogged}});
        logged = now;
        unlogged = 0;
      }
      continue;
    }
    if (failed) log_event("lease_sweep_recovered", {{"failures", failed}});
    failed = unlogged = 0;
    if (*recovered > 0) log_event("recovered_expired_attempts", {{"intents", *recovered}});
  }
}

// What the process did, in its last line (for operators and the benchmarks,
// which read intents per commit from it).
boost::json::object process_totals(const std::vector<std::unique_ptr<Worker>>& workers, const ledger::Ledger& ledger) {
  std::uint64_t connections = 0, requests = 0, problems = 0, upstream_connects = 0;
  for (auto const& w : workers) {
    connections += w->stats().connections.load(std::memory_order_relaxed);
    requests += w->stats().requests.load(std::memory_order_relaxed);
    problems += w->stats().problems.load(std::memory_order_relaxed);
    upstream_connects += w->stats().upstream_connects.load(std::memory_order_relaxed);
  }
  auto const& l = ledger.stats();
  auto const log = log_stats();
  return {{"connections", connections},
          {"requests", requests},
          {"problems", problems},
          {"upstream_connects", upstream_connects},
          {"ledger_calls", l.calls.load(std::memory_order_relaxed)},
          {"ledger_commits", l.batches.load(std::memory_order_relaxed)},
          {"ledger_calls_committed", l.batched_jobs.load(std::memory_order_relaxed)},
          {"ledger_reserve_commits", l.reserve_batches.load(std::memory_order_relaxed)},
          {"ledger_reservations", l.reservations.load(std::memory_order_relaxed)},
          {"ledger_direct_admissions", l.direct_admissions.load(std::memory_order_relaxed)},
          {"ledger_reservation_reruns", ledger.reservation_reruns()},
          {"ledger_lease_horizon_misses", ledger.horizon_misses()},
          {"ledger_queue_full", l.busy_rejections.load(std::memory_order_relaxed)},
          {"log_lines", log.lines},
          {"log_lines_dropped", log.dropped}};
}

void log_config_warnings(const config::Config& cfg) {
  for (auto const& w : config::warnings(cfg)) log_event("config_warning", {{"detail", config::format(w)}});
}

}  // namespace

int serve(std::shared_ptr<const config::Config> cfg, const ServeOptions& options) {
  ConfigSource source(cfg);
  log_config_warnings(*cfg);
  unsigned const threads = cfg->threads ? cfg->threads : std::max(1u, std::thread::hardware_concurrency());

  boost::system::error_code ec;
  auto const address = asio::ip::make_address(cfg->listen.host, ec);
  if (ec) {
    log_event("fatal", {{"error", "listen host must be an IP address: " + cfg->listen.host}});
    return 1;
  }
  tcp::endpoint endpoint(address, cfg->listen.port);

  // The ledger first: nothing is served that could not be recorded.
  auto ledger = ledger::Ledger::open(cfg->ledger, cfg->redact, replica_id());
  if (!ledger) {
    log_event("fatal", {{"error", "cannot open the ledger at " + redacted_url(cfg->ledger.url) + ": " +
                                      ledger.error().message()}});
    return 1;
  }
  // Fingerprints are keyed, so a logged one reveals nothing of its body.
  auto const key_path = ledger::fingerprint_key_path(cfg->ledger);
  auto const key = tls::load_or_create_key(key_path);
  if (!key.error.empty()) {
    log_event("fatal", {{"error", "fingerprint key: " + key.error}});
    return 1;
  }
  if (key.created) log_event("fingerprint_key_created", {{"file", key_path}, {"mode", "0600"}});
  (*ledger)->set_fingerprint_key(key.bytes);
  ReadTracker reads;

  // TLS: one verifying client context for every https:// upstream, and with
  // interception the CA and the minter of agent-facing leaves.
  TlsServices tls_services;
  auto client_ctx = tls::make_client_context(cfg->tls.upstream_ca_file);
  if (!client_ctx.ok()) {
    log_event("fatal", {{"error", "cannot set up upstream TLS: " + client_ctx.error}});
    return 1;
  }
  tls_services.client = client_ctx.value;
  if (cfg->tls.intercept) {
    auto ca = tls::load_ca(cfg->tls.ca_cert, cfg->tls.ca_key);
    if (!ca.ok()) {
      log_event("fatal", {{"error", "tls.intercept is on but the CA cannot be loaded: " + ca.error +
                                        "; create one with `idemgate ca init --dir DIR` and set tls.ca_cert and "
                                        "tls.ca_key to DIR/ca.pem and DIR/ca.key"}});
      return 1;
    }
    tls_services.minter = std::make_shared<tls::LeafMinter>(ca.value, cfg->tls.leaf_cache, 1);
  }

  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<TcpAcceptor> acceptors;
  try {
    for (unsigned i = 0; i < threads; ++i) {
      workers.push_back(std::make_unique<Worker>(source, i, ledger->get(), reads, tls_services));
      acceptors.push_back(open_acceptor(workers.back()->context(), endpoint));
      // With port 0 the first bind picks the port; the rest share it.
      if (i == 0) endpoint.port(acceptors.front().local_endpoint().port());
    }
  } catch (const boost::system::system_error& e) {
    log_event("fatal", {{"error", "cannot listen on " + cfg->listen.host + ":" + std::to_string(cfg->listen.port) +
                                      ": " + e.code().message()}});
    return 1;
  }

  // The operating surface: admin listener, escalation sweeper, webhook.
  ServerStats server_stats;
  MetricsSources metrics;
  for (auto& w : workers) metrics.workers.push_back(w.get());
  metrics.ledger = ledger->get();
  metrics.minter = tls_services.minter.get();
  metrics.server = &server_stats;
  metrics.version = IDEMGATE_VERSION;
  AdminServer admin(source, **ledger, metrics, tls_services, reads);
  if (auto why = admin.prepare(*cfg); !why.empty()) {
    log_event("fatal", {{"error", why}});
    return 1;
  }
  for (unsigned i = 0; i < threads; ++i) {
    asio::co_spawn(workers[i]->context(), accept_loop(acceptors[i], *workers[i]),
                   [](std::exception_ptr e) { log_exception("accept_loop", e); });
  }

  if (cfg->auth.mode == policy::AuthMode::off && !endpoint.address().is_loopback())
    log_event("warning", {{"detail", "listening on " + endpoint.address().to_string() +
                                         " with auth.mode off: anyone who can reach this address can spend any run's "
                                         "budget and read other runs' replays; set auth: { mode: required, users_file }"}});
  log_event("listening", {{"address", endpoint.address().to_string()},
                          {"port", endpoint.port()},
                          {"threads", threads},
                          {"config", options.config_path}});

  asio::io_context main_ioc{1};
  std::atomic<unsigned> finished{0};
  std::vector<std::thread> pool;
  for (auto& w : workers) {
    pool.emplace_back([&, worker = w.get()] {
      for (;;) {
        try {
          worker->context().run();
          break;
        } catch (const std::exception& e) {
          log_event("internal_error", {{"where", "network thread"}, {"error", e.what()}});
        }
      }
      if (++finished == workers.size()) asio::post(main_ioc, [&] { main_ioc.stop(); });
    });
  }

  asio::signal_set signals(main_ioc, SIGINT, SIGTERM, SIGHUP);
  SteadyTimer grace(main_ioc);
  bool draining = false;
  std::function<void(boost::system::error_code, int)> on_signal = [&](boost::system::error_code sec, int signo) {
    if (sec) return;
    if (signo == SIGHUP) {
      auto loaded = config::load_file(options.config_path);
      if (!loaded.config) {
        boost::json::array errors;
        for (auto const& e : loaded.errors) errors.push_back(boost::json::string(config::format(e)));
        log_event("config_reload_failed", {{"config", options.config_path}, {"errors", std::move(errors)}});
        server_stats.config_reload_failures.fetch_add(1, std::memory_order_relaxed);
      } else {
        if (loaded.config->listen.host != cfg->listen.host || loaded.config->listen.port != cfg->listen.port)
          log_event("config_reload_warning", {{"detail", "listen changes need a restart; kept the old address"}});
        if (loaded.config->tls.intercept && !tls_services.minter)
          log_event("config_reload_warning", {{"detail", "tls.intercept was off at start: turning it on needs a restart"}});
        if (loaded.config->tls.upstream_ca_file != cfg->tls.upstream_ca_file)
          log_event("config_reload_warning", {{"detail", "tls.upstream_ca_file changes need a restart"}});
        if (loaded.config->ledger.url != cfg->ledger.url)
          log_event("config_reload_warning", {{"detail", "ledger.url changes need a restart; kept the old ledger"}});
        if (loaded.config->admin.enabled != cfg->admin.enabled ||
            loaded.config->admin.listen.host != cfg->admin.listen.host ||
            loaded.config->admin.listen.port != cfg->admin.listen.port ||
            loaded.config->admin.token_file != cfg->admin.token_file ||
            loaded.config->admin.notify.url != cfg->admin.notify.url ||
            loaded.config->admin.notify.secret != cfg->admin.notify.secret)
          log_event("config_reload_warning", {{"detail", "admin changes need a restart; kept the old admin settings"}});
        log_config_warnings(*loaded.config);
        source.set(loaded.config);
        server_stats.config_reloads.fetch_add(1, std::memory_order_relaxed);
        log_event("config_reloaded", {{"config", options.config_path}, {"tools", loaded.config->tools.size()}});
      }
    } else if (!draining) {
      draining = true;
      auto const drain = source.get()->timeouts.drain;
      log_event("draining", {{"signal", signo}, {"grace_ms", drain.count()}});
      for (unsigned i = 0; i < workers.size(); ++i) {
        asio::post(workers[i]->context(), [&acceptor = acceptors[i], worker = workers[i].get()] {
          boost::system::error_code ignored;
          acceptor.close(ignored);
          worker->begin_drain();
        });
      }
      grace.expires_after(drain);
      grace.async_wait([&](boost::system::error_code tec) {
        if (tec) return;
        log_event("drain_timeout", {{"detail", "grace period over; closing remaining connections"}});
        for (auto& w : workers) w->context().stop();
      });
    } else {
      log_event("drain_forced", {{"signal", signo}});
      for (auto& w : workers) w->context().stop();
    }
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);
  asio::co_spawn(main_ioc, sweep_expired_leases(**ledger, draining, server_stats),
                 [](std::exception_ptr e) { log_exception("sweep_expired_leases", e); });
  // Announced only now: a SIGHUP or SIGTERM sent as soon as the port is known
  // must find the handlers installed.
  admin.start();
  if (admin.admin_port()) write_port_file(options.admin_port_file, admin.admin_port());
  write_port_file(options.port_file, endpoint.port());
  main_ioc.run();
  for (auto& t : pool) t.join();
  admin.stop();
  // The ledger goes first: calls it still holds complete into io_contexts
  // that are stopped but alive, and are dropped with them.
  boost::json::object totals = process_totals(workers, **ledger);
  ledger->reset();
  log_event("stopped", std::move(totals));
  return 0;
}

}  // namespace idemgate::proxy
