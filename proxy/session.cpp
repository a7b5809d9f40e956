// The client side of the proxy (see session_impl.hpp): the request loop,
// header reading with raw checks, dispatch to forward, guard or tunnel,
// gateway routes, problem answers, keep-alive and drain. CONNECT is in
// intercept.cpp.
#include "proxy/session.hpp"

#include "proxy/session_impl.hpp"
#include "ledger/executor.hpp"

namespace idemgate::proxy {

namespace detail {

Task<void> Session::run() {
  for (;;) {
    if (worker_.draining()) break;
    if (!co_await wait_for_request()) break;
    auto cfg = worker_.config().get();  // one snapshot per request
    bool keep_alive = co_await serve_one(*cfg);
    if (!keep_alive) break;
    if (served_ < 2) ++served_;
  }
  beast::error_code ignored;
  client_.socket().shutdown(TcpSocket::shutdown_send, ignored);
  if (body_unread_) co_await linger();
  client_.close();
}

Task<bool> Session::wait_for_request() {
  if (buffer_.size() != 0 || client_.is_tls()) co_return true;  // TLS may hold decrypted bytes
  std::size_t room = read_room;
  {
    auto const cfg = worker_.config().get();  // not held across the wait
    client_.expires_after(cfg->timeouts.idle);
    room = std::min<std::size_t>(room, static_cast<std::size_t>(cfg->limits.header_bytes) + 1);
  }
  idle_ = true;
  if (served_ >= 2 && buffer_.capacity() >= room && buffer_.capacity() <= 2 * read_room) {
    beast::error_code ec;
    std::size_t n = 0;
    {
      BufferedWait const counted(*this);
      std::tie(ec, n) = co_await client_.async_read_some(buffer_.prepare(room), use_tuple);
    }
    bool const released = std::exchange(release_, false);
    // Draining, the socket is shut down already (close_if_idle): a request
    // read now could not be answered.
    if (!ec) {
      buffer_.commit(n);
      co_return !worker_.draining();
    }
    if (!released || ec != asio::error::operation_aborted || worker_.draining()) co_return false;
  }
  buffer_.shrink_to_fit();
  auto [ec] = co_await client_.tcp().async_wait_readable(use_tuple);
  co_return !ec && !worker_.draining();
}

Task<void> Session::linger() {
  constexpr std::size_t max_bytes = 64u * 1024 * 1024;
  auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::array<char, 16 * 1024> scratch;
  std::size_t total = 0;
  while (total < max_bytes && std::chrono::steady_clock::now() < until) {
    client_.expires_at(std::min(until, std::chrono::steady_clock::now() + std::chrono::seconds(1)));
    auto [ec, n] = co_await client_.async_read_some(asio::buffer(scratch), use_tuple);
    if (ec) break;
    total += n;
  }
}

bool Session::take_header(const config::Config& cfg, http::request_parser<http::buffer_body>& parser,
                          std::optional<Problem>& problem) {
  auto const& limits = cfg.limits;
  std::size_t const header_limit = static_cast<std::size_t>(limits.header_bytes);
  auto const bytes = std::string_view(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  auto const check = check_raw_header(bytes, static_cast<std::size_t>(limits.request_line));
  switch (check.error) {
    case RawHeaderError::none: {
      idle_ = false;
      beast::error_code ec;
      parser.header_limit(static_cast<std::uint32_t>(header_limit + 1));
      parser.body_limit(boost::none);
      parser.put(asio::buffer(buffer_.data().data(), check.header_size), ec);
      buffer_.consume(check.header_size);
      if (!ec && parser.is_header_done()) return true;
      problem = bad_request("request header rejected: " + ec.message());
      break;
    }
    case RawHeaderError::request_line_too_long:
      problem = Problem{414, "request_line_too_long", "Request line too long",
                        "the request line is longer than limits.request_line (" +
                            std::to_string(limits.request_line) + " bytes)"};
      break;
    case RawHeaderError::obs_fold:
      problem = bad_request("obsolete line folding (obs-fold) in a header is not accepted");
      break;
    case RawHeaderError::bare_lf:
      problem = bad_request("header lines must end with CRLF");
      break;
    case RawHeaderError::nul_byte:
      problem = bad_request("NUL byte in the request header");
      break;
    case RawHeaderError::incomplete:
      if (buffer_.size() > header_limit) {
        problem = Problem{431, "header_too_large", "Request header fields too large",
                          "the request header is larger than limits.header_bytes (" +
                              std::to_string(limits.header_bytes) + " bytes)"};
      }
      break;
  }
  return false;
}

Task<Session::HeaderRead> Session::read_header(const config::Config& cfg,
                                                          http::request_parser<http::buffer_body>& parser) {
  std::size_t const header_limit = static_cast<std::size_t>(cfg.limits.header_bytes);
  bool waiting_first_byte = buffer_.size() == 0;
  idle_ = waiting_first_byte;
  if (!waiting_first_byte) client_.expires_after(cfg.timeouts.client_header);
  for (;;) {
    // GCC 12 destroys temporaries inside a co_await expression twice:
    // every problem is built into a named variable first.
    std::optional<Problem> problem;
    if (take_header(cfg, parser, problem)) co_return HeaderRead::ok;
    if (problem) {
      co_await write_problem(cfg, *problem, 11);
      co_return HeaderRead::problem_sent;
    }
    if (waiting_first_byte) client_.expires_after(cfg.timeouts.idle);
    std::size_t const room = std::min<std::size_t>(read_room, header_limit + 1 - buffer_.size());
    auto [ec, n] = co_await client_.async_read_some(buffer_.prepare(room), use_tuple);
    if (ec) {
      // EOF or a reset between requests is a normal end; a timeout
      // mid-header gets nothing (the client stopped talking).
      co_return HeaderRead::closed;
    }
    buffer_.commit(n);
    if (waiting_first_byte) {
      if (worker_.draining()) co_return HeaderRead::closed;  // shut down by close_if_idle: no answer possible
      waiting_first_byte = false;
      idle_ = false;
      client_.expires_after(cfg.timeouts.client_header);
    }
  }
}

Task<bool> Session::serve_one(const config::Config& cfg) {
  http::request_parser<http::buffer_body> parser;
  UnreadBodyCheck const unread_check{body_unread_, parser};
  // A whole header is usually buffered already (wait_for_request read it):
  // taken here, without read_header's coroutine frame.
  bool have_header = false;
  std::optional<Problem> header_problem;
  if (buffer_.size() != 0) {
    idle_ = false;
    client_.expires_after(cfg.timeouts.client_header);
    have_header = take_header(cfg, parser, header_problem);
  }
  if (header_problem) {
    co_await write_problem(cfg, *header_problem, 11);
    co_return false;
  }
  if (!have_header) {
    auto const got = co_await read_header(cfg, parser);
    if (got != HeaderRead::ok) co_return false;
  }
  worker_.stats().requests.fetch_add(1, std::memory_order_relaxed);
  auto& req = parser.get();
  unsigned const version = req.version() == 10 ? 10 : 11;
  std::optional<Target> target;
  std::optional<Problem> problem = check_request(cfg, req, target);
  if (problem) {
    co_await write_problem(cfg, *problem, version);
    co_return false;
  }
  // One check for absolute-form, CONNECT and gateway routes alike; the
  // requests inside an intercepted tunnel were authenticated by its CONNECT.
  if (cfg.auth.mode == policy::AuthMode::required && !tunnel_origin_) {
    auto const credential = req[http::field::proxy_authorization];
    if (!co_await proxy_authenticated(cfg, credential)) {
      Problem const p = proxy_auth_required(!credential.empty());
      worker_.stats().problems.fetch_add(1, std::memory_order_relaxed);
      co_await send_problem(client_, p, version, false, cfg.timeouts.client_header, &proxy_auth_challenge());
      if (request_log_enabled()) log_event("request", {{"status", p.status}, {"reason_code", p.reason_code}});
      co_return false;
    }
  }
  if (req.method() == http::verb::connect) {
    co_return co_await handle_connect(cfg, req, *target);
  }
  if (tunnel_origin_) {
    // The CONNECT named the run; the requests inside the tunnel do not.
    if (!connect_run_.empty() && req[cfg.runs.header].empty()) req.set(cfg.runs.header, connect_run_);
    if (!connect_auth_.empty() && req[http::field::proxy_authorization].empty())
      req.set(http::field::proxy_authorization, connect_auth_);
  }
  // Which tool is this? An MCP tools/call names it in the body.
  std::optional<std::string> body;
  std::optional<policy::McpRequest> inspected;  // the body read as an MCP message, handed on to the guard
  std::string mcp_tool;
  bool const mcp_read = may_be_mcp_call(req, cfg);
  if (!mcp_read && req.method() == http::verb::post) {
    // Not read as MCP (no JSON Content-Type, no Mcp-Method), so no MCP tool
    // would match and the call would pass unguarded to a server that reads
    // the body anyway. MCP messages are JSON: refused where an MCP tool is.
    if (auto const* at = mcp_endpoint(cfg, req, *target)) {
      Problem p = bad_request("a POST to an endpoint with MCP tools ('" + at->name + "') whose Content-Type ('" +
                              std::string(req[http::field::content_type]) +
                              "') is not JSON: MCP messages are application/json, and idemgate reads which tool a "
                              "message calls from JSON only; nothing was sent");
      p.status = 415;
      boost::json::value const no_id;  // named: GCC 12 destroys temporaries of a co_await expression twice
      co_await refuse_jsonrpc(cfg, p, no_id, -32600, version);
      co_return false;
    }
  }
  if (mcp_read) {
    bool too_large = false;
    body = co_await read_request_body(client_, buffer_, parser, cfg, too_large);
    if (!body) {
      if (too_large) {
        Problem const p{413, "body_too_large", "Request body too large",
                        "a JSON-RPC body to a host with MCP tools is larger than limits.inspect_body (" +
                            std::to_string(cfg.limits.inspect_body) + " bytes)"};
        co_await write_problem(cfg, p, version);
      }
      co_return false;
    }
    std::vector<policy::Header> headers;
    for (auto const& f : req) headers.push_back({f.name_string(), f.value()});
    auto const& mcp = inspected.emplace(policy::inspect_mcp_request(headers, *body));
    if (mcp.kind == policy::McpKind::header_mismatch) {
      // SEP-2243: a gateway matching on the headers and a server running
      // the body must never disagree about which tool is called.
      Problem const p = bad_request(mcp.mismatch);  // named, as above
      co_await refuse_jsonrpc(cfg, p, mcp.id, -32001, version);
      co_return false;
    }
    if (mcp.kind == policy::McpKind::tools_call) mcp_tool = mcp.tool;
    // A batch could carry any tool's call, read by no rule here; a message
    // that names a member twice calls whichever tool its reader keeps; one
    // this parser cannot read may still run on a laxer server, whatever its
    // headers say. All are refused where an MCP tool is (batches left MCP in
    // 2025-06-18), passed on as any body elsewhere.
    bool const batch = mcp.kind == policy::McpKind::batch;
    bool const repeated = mcp.kind == policy::McpKind::repeated_names;
    if (batch || repeated || mcp.unreadable) {
      if (auto const* at = mcp_endpoint(cfg, req, *target)) {
        std::string const where = "to an endpoint with MCP tools ('" + at->name + "')";
        // Each refusal's detail, JSON-RPC code and id (named, as above).
        std::string detail;
        int code = -32600;
        boost::json::value id;
        if (batch) {
          detail = "a JSON-RPC batch " + where +
                   ": MCP has no batches since revision 2025-06-18; send one tools/call per request; nothing was sent";
        } else if (repeated) {
          detail = "a JSON-RPC message " + where +
                   " names a member twice in one object: servers differ on which of the two they read, so which "
                   "tool it calls has no single reading; send each member once; nothing was sent";
          id = mcp.id;
        } else {
          detail = "a body " + where +
                   " that is not JSON idemgate reads (NaN or Infinity, a byte order mark, invalid UTF-8, nesting "
                   "deeper than 32): it cannot tell which tool the message calls, whatever its headers say; "
                   "nothing was sent";
          code = -32700;
        }
        Problem const p = bad_request(std::move(detail));
        co_await refuse_jsonrpc(cfg, p, id, code, version);
        co_return false;
      }
    }
  }
  policy::TargetMatch matched;
  if (cfg.tool_table)
    matched = cfg.tool_table->match_target(
        {req.method_string(), target->scheme, target->host, target->port, target->origin_form, mcp_tool});
  policy::Tool const* tool = matched.tool;
  ForwardResult r;
  if (matched.ambiguous_write) {
    Problem const p = ambiguous_spelling(req.method_string(), target->url(),
                                         matched.ambiguous_path, matched.ambiguous_write->name);
    co_await write_problem(cfg, p, version);
    co_return false;
  } else if (tool) {
    r = co_await guard_request(client_, buffer_, parser, *target, *tool, cfg, worker_, std::move(body),
                               std::move(inspected));
  } else if (cfg.unmatched == policy::Unmatched::deny) {
    Problem const p{403, "policy_deny", "No tool matches",
                    std::string(req.method_string()) + " " + target->host + target->origin_form.substr(0, target->origin_form.find('?')) +
                        " matches no configured tool and unmatched is deny"};
    co_await write_problem(cfg, p, version);
    co_return false;
  } else if (body) {
    r = co_await forward_buffered(client_, parser, *target, std::move(*body), cfg, worker_);
  } else {
    r = co_await forward_request(client_, buffer_, parser, *target, cfg, worker_);
  }
  co_return r.client_keep_alive && !worker_.draining();
}

bool Session::may_be_mcp_call(const http::request<http::buffer_body>& req, const config::Config& cfg) {
  if (req.method() != http::verb::post) return false;
  // Any spelling a server accepts ("Application/JSON; charset=utf-8").
  auto const ct = req[http::field::content_type];
  bool json = false;
  for (std::size_t i = 0; !json && i + 4 <= ct.size(); ++i) json = policy::iequals(ct.substr(i, 4), "json");
  if (!json && req.find("Mcp-Method") == req.end()) return false;
  return cfg.tool_table && cfg.tool_table->has_mcp_tools();
}

const policy::Tool* Session::mcp_endpoint(const config::Config& cfg, const http::request<http::buffer_body>& req,
                                          const Target& target) {
  if (!cfg.tool_table || !cfg.tool_table->has_mcp_tools()) return nullptr;
  auto const at = cfg.tool_table->match_target(
      {req.method_string(), target.scheme, target.host, target.port, target.origin_form, {}, true});
  return at.tool && !at.tool->match.mcp_tool.empty() ? at.tool : nullptr;
}

Task<void> Session::refuse_jsonrpc(const config::Config& cfg, const Problem& p, const boost::json::value& id,
                                   int code, unsigned version) {
  std::string answer = mcp_error_body(p, id, code);
  worker_.stats().problems.fetch_add(1, std::memory_order_relaxed);
  co_await send_own_answer(client_, p.status, "application/json", std::move(answer), std::nullopt, version, false,
                           cfg.timeouts.client_header);
}

std::optional<Problem> Session::check_request(const config::Config& cfg, const http::request<http::buffer_body>& req,
                                              std::optional<Target>& target) const {
  if (req.version() != 10 && req.version() != 11) {
    return Problem{505, "http_version_not_supported", "HTTP version not supported",
                   "only HTTP/1.0 and HTTP/1.1 are spoken here"};
  }
  if (!acceptable_request_transfer_encoding(req)) {
    return bad_request("Transfer-Encoding must be exactly 'chunked'");
  }
  if (req.method() == http::verb::trace &&
      (req.chunked() || (req.has_content_length() && req[http::field::content_length] != "0")))
    return bad_request("a TRACE request carries no content (RFC 9110, section 9.3.8)");
  if (req.method() == http::verb::connect) {
    if (tunnel_origin_) return bad_request("CONNECT inside a CONNECT tunnel is not supported");
    target = parse_authority_target(req.target());
    if (!target) return bad_request("CONNECT needs an authority-form target host:port");
    return std::nullopt;
  }
  if (tunnel_origin_) {
    std::string_view const t = req.target();
    if (!t.empty() && t.front() == '/') {
      target = *tunnel_origin_;
      target->origin_form = std::string(t);
      return std::nullopt;
    }
    target = parse_absolute_target(t);
    if (!target || target->scheme != tunnel_origin_->scheme || target->host != tunnel_origin_->host ||
        target->port != tunnel_origin_->port) {
      target.reset();
      return bad_request("inside the CONNECT tunnel to " + tunnel_origin_->authority() +
                         " the target must be origin-form (/path) or a " + tunnel_origin_->scheme +
                         ":// URL for that origin");
    }
    return std::nullopt;
  }
  target = parse_absolute_target(req.target());
  if (!target) {
    if (!req.target().empty() && req.target().front() == '/') {
      target = route_target(cfg, req.target());
      if (target) return std::nullopt;
      return Problem{400, "not_a_proxy_request", "Not a proxy request",
                     "origin-form target '" + std::string(req.target()) +
                         "' matches no gateway route; send absolute-form (http://host/path) through HTTP_PROXY"};
    }
    return bad_request("request target is not an absolute http:// or https:// URL");
  }
  if (target->scheme != "http") {
    return bad_request("https:// targets arrive through CONNECT, not in absolute form");
  }
  return std::nullopt;
}

std::optional<Target> Session::route_target(const config::Config& cfg, std::string_view origin) {
  std::string_view const path = origin.substr(0, origin.find('?'));
  config::Route const* best = nullptr;
  for (auto const& r : cfg.routes) {
    if (path.starts_with(r.prefix) && (!best || r.prefix.size() > best->prefix.size())) best = &r;
  }
  if (!best) return std::nullopt;
  return proxy::route_target(best->prefix, best->upstream, origin);
}

Task<void> Session::write_problem(const config::Config& cfg, const Problem& p, unsigned version) {
  worker_.stats().problems.fetch_add(1, std::memory_order_relaxed);
  co_await send_problem(client_, p, version, false, cfg.timeouts.client_header);
  if (request_log_enabled()) log_event("request", {{"status", p.status}, {"reason_code", p.reason_code}});
}

}  // namespace detail

Task<void> serve_connection(TcpSocket socket, Worker& worker) {
  detail::Session session(std::move(socket), worker);
  co_await session.run();
}

}  // namespace idemgate::proxy
