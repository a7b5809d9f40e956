// CONNECT host:port on an agent connection (see session_impl.hpp), as
// plan_connect decides: intercepted (TLS terminated here over a leaf minted
// for the host, or plain HTTP when the client's first byte is not a TLS
// handshake; the request loop then serves the requests inside), a blind
// tunnel, or refused.
#include "proxy/session_impl.hpp"
#include "ledger/executor.hpp"

namespace idemgate::proxy::detail {

Task<bool> Session::handle_connect(const config::Config& cfg, const http::request<http::buffer_body>& req,
                                              const Target& target) {
  bool const can_intercept = cfg.tls.intercept && worker_.tls().minter;
  auto const plan = plan_connect(cfg, target, can_intercept);
  if (plan.action == ConnectAction::refuse) {
    if (plan.problem->reason_code == "intercept_required")
      log_event("intercept_required", {{"host", target.host}, {"port", target.port}, {"detail", plan.problem->detail}});
    co_await write_problem(cfg, *plan.problem, 11);
    co_return false;
  }
  if (plan.action == ConnectAction::intercept) {
    if (auto v = check_egress_host(target, cfg); !v.allowed) {
      worker_.stats().egress_denied.fetch_add(1, std::memory_order_relaxed);
      Problem const p = egress_denied(target.host + " is not allowed: " + v.reason);
      co_await write_problem(cfg, p, 11);
      co_return false;
    }
    co_return co_await intercept(cfg, req, target);
  }
  co_await run_tunnel(client_, buffer_, target, cfg, worker_);
  co_return false;
}

Task<bool> Session::intercept(const config::Config& cfg, const http::request<http::buffer_body>& req,
                                         const Target& target) {
  static constexpr char kEstablished[] = "HTTP/1.1 200 Connection Established\r\n\r\n";
  client_.expires_after(cfg.timeouts.client_header);
  auto [wec, wn] = co_await asio::async_write(client_, asio::buffer(kEstablished, sizeof kEstablished - 1), use_tuple);
  if (wec) co_return false;
  // The client speaks first: its first byte tells TLS from plain HTTP.
  if (buffer_.size() == 0) {
    client_.expires_after(cfg.timeouts.client_header);
    auto [rec, rn] = co_await client_.async_read_some(buffer_.prepare(4096), use_tuple);
    if (rec) co_return false;
    buffer_.commit(rn);
  }
  bool const tls = starts_tls_handshake(*static_cast<const unsigned char*>(buffer_.data().data()));
  if (tls && !co_await accept_tls(cfg, target)) co_return false;
  if (request_log_enabled())
    log_event("request", {{"method", "CONNECT"}, {"host", target.host}, {"port", target.port}, {"status", 200},
                          {"intercepted", tls ? "tls" : "http"}});
  Target origin;
  origin.scheme = tls ? "https" : "http";
  origin.host = target.host;
  origin.port = target.port;
  origin.host_is_ip = target.host_is_ip;
  origin.origin_form = "/";
  tunnel_origin_ = std::move(origin);
  connect_run_ = std::string(req[cfg.runs.header]);
  connect_auth_ = std::string(req[http::field::proxy_authorization]);
  co_return !worker_.draining();
}

Task<bool> Session::accept_tls(const config::Config& cfg, const Target& target) {
  // Minting runs on the minter's pool; a cached leaf comes straight back.
  std::string const host = target.host;
  auto minted = co_await worker_.tls().minter->async_mint(host, use_task);
  if (!minted.ok()) {
    // The client now expects TLS: there is no way to send it a problem.
    log_event("tls_intercept_failed", {{"host", target.host}, {"error", minted.error}});
    co_return false;
  }
  auto& tls = client_.start_tls(*minted.value);
  client_.expires_after(cfg.timeouts.client_header);
  // The bytes read so far are the start of the client's hello.
  auto [hec, used] = co_await tls.async_handshake(ssl::stream_base::server, buffer_.data(), use_tuple);
  buffer_.consume(buffer_.size());
  if (hec) {
    log_event("tls_intercept_failed", {{"host", target.host}, {"error", "handshake with the agent: " + hec.message()}});
    co_return false;
  }
  worker_.stats().intercepted.fetch_add(1, std::memory_order_relaxed);
  co_return true;
}

}  // namespace idemgate::proxy::detail
