// One client connection: reads requests, forwards them (or tunnels CONNECT),
// and writes answers, until the client, a deadline or a drain ends it.
#pragma once

#include "ledger/executor.hpp"

#include <boost/asio/ip/tcp.hpp>

namespace idemgate::proxy {

class Worker;

// Serves the connection to completion. Runs on worker's io_context.
Task<void> serve_connection(TcpSocket socket, Worker& worker);

}  // namespace idemgate::proxy
