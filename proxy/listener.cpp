// The accept loop (see listener.hpp).
#include "proxy/listener.hpp"

#include "proxy/log.hpp"
#include "proxy/session.hpp"
#include "proxy/worker.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>

#include <sys/socket.h>

namespace idemgate::proxy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

TcpAcceptor open_acceptor(asio::io_context& ioc, const tcp::endpoint& ep) {
  TcpAcceptor a(ioc);
  a.open(ep.protocol());
  a.set_option(TcpAcceptor::reuse_address(true));
  a.set_option(asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true));
  a.bind(ep);
  a.listen(asio::socket_base::max_listen_connections);
  return a;
}

Task<void> accept_loop(TcpAcceptor& acceptor, Worker& worker) {
  auto ex = co_await asio::this_coro::executor;
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::as_tuple(use_task));
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of file descriptors and the like: say so and back off briefly
      // rather than spin.
      log_event("accept_error", {{"error", ec.message()}});
      SteadyTimer pause(ex, std::chrono::milliseconds(50));
      co_await pause.async_wait(asio::as_tuple(use_task));
      continue;
    }
    auto cfg = worker.config().get();
    if (worker.active_sessions() >= cfg->limits.max_connections) {
      boost::system::error_code ignored;
      socket.close(ignored);
      continue;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    asio::co_spawn(ex, serve_connection(std::move(socket), worker), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        log_event("session_error", {{"error", ex.what()}});
      }
    });
  }
}

}  // namespace idemgate::proxy
