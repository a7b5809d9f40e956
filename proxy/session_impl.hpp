// The client side of one agent connection (serve_connection in
// session.hpp): the class, shared by session.cpp (the request loop: header
// reading with raw checks, dispatch to forward, guard or tunnel, gateway
// routes, problem answers, keep-alive and drain) and intercept.cpp (CONNECT:
// interception, then the same pipeline runs on the requests inside, or a
// blind tunnel). Included by those two files only.
#pragma once

#include "proxy/session.hpp"

#include "ledger/executor.hpp"
#include "policy/headers.hpp"
#include "policy/match.hpp"
#include "policy/mcp.hpp"
#include "proxy/connect.hpp"
#include "proxy/connect_plan.hpp"
#include "proxy/forward.hpp"
#include "proxy/guard.hpp"
#include "proxy/http_rules.hpp"
#include "proxy/log.hpp"
#include "proxy/mcp_answer.hpp"
#include "proxy/problem.hpp"
#include "proxy/proxy_auth.hpp"
#include "proxy/respond.hpp"
#include "proxy/tunnel.hpp"
#include "proxy/worker.hpp"
#include "tls/leaf_minter.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
#include <tuple>
#include <utility>

namespace idemgate::proxy::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;

inline constexpr auto use_tuple = asio::as_tuple(use_task);

class Session final : public Drainable {
public:
  Session(TcpSocket socket, Worker& worker) : client_(std::move(socket)), worker_(worker) {
    worker_.add(this);
    worker_.stats().connections.fetch_add(1, std::memory_order_relaxed);
  }
  ~Session() { worker_.remove(this); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void close_if_idle() override {
    if (idle_) {
      beast::error_code ignored;
      client_.socket().shutdown(TcpSocket::shutdown_both, ignored);
      client_.socket().cancel(ignored);
    }
  }

  void release_if_quiet(std::chrono::steady_clock::time_point before) override {
    if (!buffered_since_ || *buffered_since_ > before) return;
    release_ = true;  // the read ends as operation_aborted and the wait goes on without the buffer
    beast::error_code ignored;
    client_.socket().cancel(ignored);
  }

  Task<void> run();

private:
  enum class HeaderRead { ok, closed, problem_sent };

  // Between requests (bounded by timeouts.idle). A connection in use, one
  // that has carried two requests already, reads the next one straight into
  // the buffer it has: no allocation, and no readiness wait to register with
  // the reactor (an epoll_ctl per request). After one to two seconds of
  // quiet the worker's sweep takes the buffer back, and an idle connection
  // holds as little as possible: no buffer, no parser, no request frame, only
  // a wait for readability. Thousands of idle agents cost kilobytes each.
  // false: the connection ended (idle timeout, drain, peer gone).
  Task<bool> wait_for_request();

  // A wait that holds buffer_, for as long as it lasts: what the sweep looks
  // for, and the idemgate_connections_idle_buffered gauge.
  struct BufferedWait {
    explicit BufferedWait(Session& s) : s(s) {
      s.buffered_since_ = TimedSocket::coarse_now();
      s.worker_.stats().idle_buffered.fetch_add(1, std::memory_order_relaxed);
      s.worker_.idle_buffer_held();
    }
    ~BufferedWait() {
      s.worker_.stats().idle_buffered.fetch_sub(1, std::memory_order_relaxed);
      s.buffered_since_.reset();
    }
    BufferedWait(const BufferedWait&) = delete;
    BufferedWait& operator=(const BufferedWait&) = delete;
    Session& s;
  };

  // Lingering close (as nginx's lingering_close): we answered before reading
  // the whole request body (a 413, a refusal). Closing with unread bytes
  // makes the kernel reset the connection, and a client still sending its
  // body never reads our answer. Discard what it sends, within bounds.
  Task<void> linger();

  // Set when serve_one ends with a request body not (fully) read.
  struct UnreadBodyCheck {
    bool& flag;
    const http::request_parser<http::buffer_body>& parser;
    ~UnreadBodyCheck() { flag = parser.is_header_done() && !parser.is_done(); }
  };

  // The buffered bytes checked raw, then parsed when they hold a whole
  // header (true). false with problem set: refused; without: incomplete.
  bool take_header(const config::Config& cfg, http::request_parser<http::buffer_body>& parser,
                   std::optional<Problem>& problem);

  // Reads one request header into parser, checking the raw bytes first.
  Task<HeaderRead> read_header(const config::Config& cfg, http::request_parser<http::buffer_body>& parser);

  Task<bool> serve_one(const config::Config& cfg);

  // A POST with a JSON body (or the Mcp-Method header) while some tool is an
  // MCP tool: the tool name is in the body (and, since 2026-07-28, mirrored
  // in Mcp-Name), and both are compared before matching.
  static bool may_be_mcp_call(const http::request<http::buffer_body>& req, const config::Config& cfg);
  // The endpoint's best tool when it is an MCP tool (one of any name
  // matches), else nullptr: where a body no tool can read is refused.
  static const policy::Tool* mcp_endpoint(const config::Config& cfg, const http::request<http::buffer_body>& req,
                                          const Target& target);
  // A JSON-RPC error answer (the problem's status: 400 or 415) on a
  // connection that then closes.
  Task<void> refuse_jsonrpc(const config::Config& cfg, const Problem& p, const boost::json::value& id, int code,
                            unsigned version);

  // Everything about a request header that can be refused before any I/O;
  // sets target (absolute-form, a gateway route, or inside an intercepted
  // tunnel the CONNECT's origin plus the origin-form path).
  std::optional<Problem> check_request(const config::Config& cfg, const http::request<http::buffer_body>& req,
                                       std::optional<Target>& target) const;

  // A gateway route: the longest route prefix the origin-form target starts
  // with maps it onto that route's upstream base URL.
  static std::optional<Target> route_target(const config::Config& cfg, std::string_view origin);

  // CONNECT host:port, as plan_connect decides: intercepted (the same
  // pipeline then serves the requests inside: TLS terminated here, or plain
  // HTTP when the client's first byte is not a TLS handshake), a blind
  // tunnel, or refused (a host with tools while tls.intercept is off is
  // 403 intercept_required, never tunnelled blind past its tools).
  Task<bool> handle_connect(const config::Config& cfg, const http::request<http::buffer_body>& req,
                                       const Target& target);

  Task<bool> intercept(const config::Config& cfg, const http::request<http::buffer_body>& req,
                                  const Target& target);

  // The TLS handshake with the agent, over a leaf minted for the host.
  Task<bool> accept_tls(const config::Config& cfg, const Target& target);

  Task<void> write_problem(const config::Config& cfg, const Problem& p, unsigned version);

  ProxyStream client_;
  static constexpr std::size_t read_room = 4096;  // bytes asked of one header read
  beast::flat_buffer buffer_;
  unsigned served_ = 0;  // requests this connection carried, counted up to 2
  std::optional<std::chrono::steady_clock::time_point> buffered_since_;  // an idle wait holding buffer_
  bool release_ = false;  // the sweep cancelled that wait
  Worker& worker_;
  bool idle_ = true;
  bool body_unread_ = false;
  std::optional<Target> tunnel_origin_;  // set once a CONNECT was intercepted (https, or http inside)
  std::string connect_run_;           // the CONNECT's run header, for the requests inside
  std::string connect_auth_;          // and its Proxy-Authorization
};

}  // namespace idemgate::proxy::detail
