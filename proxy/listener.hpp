// Accepting client connections on one network thread.
#pragma once

#include "ledger/executor.hpp"

#include <boost/asio/ip/tcp.hpp>

namespace idemgate::proxy {

class Worker;

// Opens an acceptor on endpoint with SO_REUSEADDR and SO_REUSEPORT.
TcpAcceptor open_acceptor(boost::asio::io_context& ioc, const boost::asio::ip::tcp::endpoint& ep);

// Accepts until the acceptor is closed, spawning a session per connection.
Task<void> accept_loop(TcpAcceptor& acceptor, Worker& worker);

}  // namespace idemgate::proxy
