// Upstream connection establishment (see connect.hpp).
#include "proxy/connect.hpp"

#include "proxy/worker.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

std::string where(const Target& t) { return t.host + ":" + std::to_string(t.port); }
}  // namespace

asio::awaitable<ConnectOutcome> connect_upstream(const Target& target, const config::Config& cfg, Worker& worker) {
  auto ex = co_await asio::this_coro::executor;
  auto const deadline = std::chrono::steady_clock::now() + cfg.timeouts.upstream_connect;
  std::vector<tcp::endpoint> endpoints;

  beast::error_code addr_ec;
  auto const literal = asio::ip::make_address(target.host, addr_ec);
  if (!addr_ec) {
    endpoints.emplace_back(literal, target.port);
  } else {
    // getaddrinfo runs on Asio's resolver thread; the timer bounds our wait.
    tcp::resolver resolver(ex);
    asio::steady_timer timer(ex, deadline);
    bool timed_out = false;
    timer.async_wait([&](beast::error_code ec) {
      if (!ec) {
        timed_out = true;
        resolver.cancel();
      }
    });
    auto [ec, results] = co_await resolver.async_resolve(target.host, std::to_string(target.port), use_tuple);
    timer.cancel();
    if (timed_out) {
      co_return ConnectOutcome{nullptr, Problem{504, "upstream_connect_timeout", "Upstream connect timed out",
                                                "resolving " + target.host + " took longer than timeouts.upstream_connect"}};
    }
    if (ec) {
      co_return ConnectOutcome{nullptr, upstream_connect_failed("cannot resolve " + target.host + ": " + ec.message())};
    }
    for (auto const& r : results) endpoints.push_back(r.endpoint());
  }

  auto conn = std::make_unique<UpstreamConnection>(ex);
  conn->stream.expires_at(deadline);
  worker.stats().upstream_connects.fetch_add(1, std::memory_order_relaxed);
  auto [ec, ep] = co_await conn->stream.async_connect(endpoints, use_tuple);
  if (ec == beast::error::timeout) {
    co_return ConnectOutcome{nullptr, Problem{504, "upstream_connect_timeout", "Upstream connect timed out",
                                              "connecting to " + where(target) +
                                                  " took longer than timeouts.upstream_connect"}};
  }
  if (ec) {
    co_return ConnectOutcome{nullptr, upstream_connect_failed("connecting to " + where(target) + ": " + ec.message())};
  }
  beast::error_code ignored;
  conn->stream.socket().set_option(tcp::no_delay(true), ignored);
  conn->stream.expires_never();
  co_return ConnectOutcome{std::move(conn), std::nullopt};
}

}  // namespace idemgate::proxy
