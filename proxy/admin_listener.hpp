// The admin listener's HTTP/1.1 server: one acceptor on admin.listen, one
// coroutine per connection, every read and write under a deadline and every
// request under a size limit; the routes are admin_api.cpp's.
#pragma once

#include "proxy/admin_api.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace idemgate::proxy {

class AdminListener {
 public:
  // Binds now: a busy or bad address throws boost::system::system_error at start-up.
  AdminListener(boost::asio::io_context& ioc, const boost::asio::ip::tcp::endpoint& endpoint, AdminContext& ctx);
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  void start();
  // On the io_context's thread: stops accepting.
  void stop();

 private:
  Task<void> accept_loop();
  Task<void> serve(TcpSocket socket);

  boost::asio::io_context& ioc_;
  TcpAcceptor acceptor_;
  AdminContext& ctx_;
};

}  // namespace idemgate::proxy
