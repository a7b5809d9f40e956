// Blind CONNECT tunnels (see tunnel.hpp).
#include "proxy/tunnel.hpp"

#include "proxy/connect.hpp"
#include "proxy/log.hpp"
#include "proxy/respond.hpp"
#include "proxy/worker.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/write.hpp>

#include <array>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr auto use_tuple = asio::as_tuple(use_task);

// Copies from -> to until EOF (then half-closes to) or an error (then
// closes both, which ends the other direction too).
Task<std::uint64_t> pump(ProxyStream& from, ProxyStream& to, std::chrono::milliseconds idle) {
  std::array<char, 16 * 1024> buf;
  std::uint64_t total = 0;
  for (;;) {
    from.expires_after(idle);
    auto [rec, n] = co_await from.async_read_some(asio::buffer(buf), use_tuple);
    if (n > 0) {
      to.expires_after(idle);
      auto [wec, w] = co_await asio::async_write(to, asio::buffer(buf.data(), n), use_tuple);
      total += w;
      if (wec) break;
    }
    if (rec == asio::error::eof) {
      beast::error_code ignored;
      to.socket().shutdown(TcpSocket::shutdown_send, ignored);
      co_return total;
    }
    if (rec) break;
  }
  beast::error_code ignored;
  from.socket().close(ignored);
  to.socket().close(ignored);
  co_return total;
}

}  // namespace

Task<void> run_tunnel(ProxyStream& client, beast::flat_buffer& client_buffer, const Target& target,
                                 const config::Config& cfg, Worker& worker) {
  auto const start = std::chrono::steady_clock::now();
  auto outcome = co_await connect_upstream(target, cfg, worker, true);
  if (!outcome.connection) {
    worker.stats().problems.fetch_add(1, std::memory_order_relaxed);
    co_await send_problem(client, *outcome.problem, 11, false, cfg.timeouts.client_header);
    if (request_log_enabled())
      log_event("request", {{"method", "CONNECT"}, {"host", target.host}, {"port", target.port},
                            {"status", outcome.problem->status}, {"reason_code", outcome.problem->reason_code}});
    co_return;
  }
  worker.stats().tunnels.fetch_add(1, std::memory_order_relaxed);
  auto& upstream = outcome.connection->stream;
  static constexpr char kEstablished[] = "HTTP/1.1 200 Connection Established\r\n\r\n";
  client.expires_after(cfg.timeouts.client_header);
  auto [ec, n] = co_await asio::async_write(client, asio::buffer(kEstablished, sizeof kEstablished - 1), use_tuple);
  if (ec) co_return;
  std::uint64_t early = 0;
  if (client_buffer.size() > 0) {
    // Bytes the client sent right behind the CONNECT header.
    upstream.expires_after(cfg.timeouts.idle);
    auto [wec, w] = co_await asio::async_write(upstream, client_buffer.data(), use_tuple);
    if (wec) co_return;
    early = w;
    client_buffer.consume(client_buffer.size());
  }
  auto [up_bytes, down_bytes] =
      co_await (pump(client, upstream, cfg.timeouts.idle) && pump(upstream, client, cfg.timeouts.idle));
  if (request_log_enabled()) {
    auto const ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    log_event("request", {{"method", "CONNECT"},
                          {"host", target.host},
                          {"port", target.port},
                          {"status", 200},
                          {"bytes_in", up_bytes + early},
                          {"bytes_out", down_bytes},
                          {"duration_ms", ms.count()}});
  }
}

}  // namespace idemgate::proxy
