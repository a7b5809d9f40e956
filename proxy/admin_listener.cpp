// The admin listener's accept loop and sessions (see admin_listener.hpp).
#include "proxy/admin_listener.hpp"

#include "proxy/log.hpp"
#include "proxy/problem.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {
constexpr auto use_tuple = asio::as_tuple(use_task);
constexpr std::chrono::seconds io_deadline{10};
constexpr std::uint32_t header_limit = 16 * 1024;
constexpr std::uint64_t body_limit = 64 * 1024;
}  // namespace

AdminListener::AdminListener(asio::io_context& ioc, const tcp::endpoint& endpoint, AdminContext& ctx)
    : ioc_(ioc), acceptor_(ioc), ctx_(ctx) {
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(TcpAcceptor::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(asio::socket_base::max_listen_connections);
}

void AdminListener::start() {
  asio::co_spawn(ioc_, accept_loop(), [](std::exception_ptr e) { log_exception("admin accept_loop", e); });
}

void AdminListener::stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

Task<void> AdminListener::accept_loop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(use_tuple);
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (ec) {
      log_event("accept_error", {{"listener", "admin"}, {"error", ec.message()}});
      SteadyTimer pause(ioc_, std::chrono::milliseconds(50));
      co_await pause.async_wait(use_tuple);
      continue;
    }
    asio::co_spawn(ioc_, serve(std::move(socket)), [](std::exception_ptr e) { log_exception("admin session", e); });
  }
}

Task<void> AdminListener::serve(TcpSocket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(header_limit);
    parser.body_limit(body_limit);
    stream.expires_after(io_deadline);
    auto [ec, n] = co_await http::async_read(stream, buffer, parser, use_tuple);
    if (ec) {
      if (ec == http::error::body_limit || ec == http::error::header_limit) {
        Problem p{413, "body_too_large", "Request too large",
                  "admin requests are limited to 16 KiB of headers and 64 KiB of body", std::nullopt, {}};
        http::response<http::string_body> res{http::status::payload_too_large, 11};
        res.set(http::field::content_type, "application/problem+json");
        res.body() = problem_json(p) + "\n";
        res.keep_alive(false);
        res.prepare_payload();
        stream.expires_after(io_deadline);
        co_await http::async_write(stream, res, use_tuple);
      }
      break;
    }
    auto const& req = parser.get();
    auto res = co_await handle_admin_request(ctx_, req);
    if (req.method() == http::verb::head) res.body().clear();
    stream.expires_after(io_deadline);
    auto [wec, written] = co_await http::async_write(stream, res, use_tuple);
    if (wec || !res.keep_alive()) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

}  // namespace idemgate::proxy
