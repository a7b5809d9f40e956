// Accepting client connections on one network thread.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace idemgate::proxy {

class Worker;

// Opens an acceptor on endpoint with SO_REUSEADDR and SO_REUSEPORT.
boost::asio::ip::tcp::acceptor open_acceptor(boost::asio::io_context& ioc, const boost::asio::ip::tcp::endpoint& ep);

// Accepts until the acceptor is closed, spawning a session per connection.
boost::asio::awaitable<void> accept_loop(boost::asio::ip::tcp::acceptor& acceptor, Worker& worker);

}  // namespace idemgate::proxy
