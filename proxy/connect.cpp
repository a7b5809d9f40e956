// Upstream connection establishment (see connect.hpp): the egress guard on
// the host name, asynchronous DNS, the egress guard on every address, TCP
// connect, and for https:// a verified TLS handshake, all under one deadline
// (timeouts.upstream_connect).
#include "proxy/connect.hpp"

#include "policy/egress.hpp"
#include "proxy/worker.hpp"
#include "tls/client_context.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/error.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {
constexpr auto use_tuple = asio::as_tuple(use_task);

std::string where(const Target& t) { return t.host + ":" + std::to_string(t.port); }

policy::EgressVerdict check_endpoint_address(const asio::ip::address& a, policy::AddressRules rules) {
  if (a.is_v4()) {
    auto const bytes = a.to_v4().to_bytes();
    return policy::check_address(std::span<const std::uint8_t>(bytes.data(), bytes.size()), rules);
  }
  auto const bytes = a.to_v6().to_bytes();
  return policy::check_address(std::span<const std::uint8_t>(bytes.data(), bytes.size()), rules);
}

ConnectOutcome failed(Problem p) { return ConnectOutcome{nullptr, std::move(p)}; }

ConnectOutcome connect_timeout(std::string detail) {
  return failed(Problem{504, "upstream_connect_timeout", "Upstream connect timed out", std::move(detail),
                        std::nullopt, {}});
}

}  // namespace

policy::EgressVerdict check_egress_host(const Target& target, const config::Config& cfg) {
  return policy::check_host(cfg.egress.allow_hosts, target.host);
}

Task<ConnectOutcome> connect_upstream(const Target& target, const config::Config& cfg, Worker& worker,
                                                 bool raw) {
  auto ex = co_await asio::this_coro::executor;
  auto const deadline = std::chrono::steady_clock::now() + cfg.timeouts.upstream_connect;
  policy::AddressRules const rules{cfg.egress.allow_private, cfg.egress.allow_loopback};
  std::vector<tcp::endpoint> endpoints;

  // The allow-list first: a host outside it is not even resolved.
  if (auto v = check_egress_host(target, cfg); !v.allowed) {
    worker.stats().egress_denied.fetch_add(1, std::memory_order_relaxed);
    co_return failed(egress_denied(target.host + " is not allowed: " + v.reason));
  }

  beast::error_code addr_ec;
  auto const literal = asio::ip::make_address(target.host, addr_ec);
  if (!addr_ec) {
    endpoints.emplace_back(literal, target.port);
  } else {
    // getaddrinfo runs on Asio's resolver thread; the timer bounds our wait.
    TcpResolver resolver(ex);
    SteadyTimer timer(ex, deadline);
    bool timed_out = false;
    timer.async_wait([&](beast::error_code ec) {
      if (!ec) {
        timed_out = true;
        resolver.cancel();
      }
    });
    auto [ec, results] = co_await resolver.async_resolve(target.host, std::to_string(target.port), use_tuple);
    timer.cancel();
    if (timed_out) co_return connect_timeout("resolving " + target.host + " took longer than timeouts.upstream_connect");
    if (ec) co_return failed(upstream_connect_failed("cannot resolve " + target.host + ": " + ec.message()));
    for (auto const& r : results) endpoints.push_back(r.endpoint());
  }
  // Every address, not just the first: a name that also resolves to a
  // metadata or private address is refused as a whole (DNS rebinding).
  for (auto const& ep : endpoints) {
    auto const v = check_endpoint_address(ep.address(), rules);
    if (!v.allowed) {
      worker.stats().egress_denied.fetch_add(1, std::memory_order_relaxed);
      std::string const via = addr_ec ? target.host + " resolves to " + ep.address().to_string()
                                      : ep.address().to_string();
      co_return failed(egress_denied(via + ": " + v.reason));
    }
  }

  auto conn = std::make_unique<UpstreamConnection>(ex);
  conn->stream.expires_at(deadline);
  worker.stats().upstream_connects.fetch_add(1, std::memory_order_relaxed);
  auto [ec, ep] = co_await conn->stream.tcp().async_connect(endpoints, use_tuple);
  if (ec == beast::error::timeout)
    co_return connect_timeout("connecting to " + where(target) + " took longer than timeouts.upstream_connect");
  if (ec) co_return failed(upstream_connect_failed("connecting to " + where(target) + ": " + ec.message()));
  beast::error_code ignored;
  conn->stream.socket().set_option(tcp::no_delay(true), ignored);

  if (target.scheme == "https" && !raw) {
    auto const& client_ctx = worker.tls().client;
    if (!client_ctx) co_return failed(upstream_tls_failed("no TLS client context was set up at start"));
    auto& tls = conn->stream.start_tls(*client_ctx);
    if (auto pec = tls::prepare_client_stream(tls, target.host))
      co_return failed(upstream_tls_failed("cannot verify " + target.host + ": " + pec.message()));
    auto [hec] = co_await tls.async_handshake(ssl::stream_base::client, use_tuple);
    if (hec == beast::error::timeout)
      co_return connect_timeout("the TLS handshake with " + where(target) +
                                " took longer than timeouts.upstream_connect");
    if (hec) {
      co_return failed(upstream_tls_failed("TLS with " + where(target) + ": " +
                                           tls::describe_handshake_error(hec, tls)));
    }
  }
  conn->stream.expires_never();
  co_return ConnectOutcome{std::move(conn), std::nullopt};
}

}  // namespace idemgate::proxy
