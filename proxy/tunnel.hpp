// CONNECT host:port as a blind bidirectional byte tunnel.
#pragma once

#include "config/config.hpp"
#include "ledger/executor.hpp"
#include "proxy/http_rules.hpp"
#include "proxy/stream.hpp"

#include <boost/beast/core/flat_buffer.hpp>

namespace idemgate::proxy {

class Worker;

// Connects, answers 200, then copies bytes both ways until both sides have
// finished or the idle deadline passes. The client connection ends with it.
Task<void> run_tunnel(ProxyStream& client, boost::beast::flat_buffer& client_buffer,
                                        const Target& target, const config::Config& cfg, Worker& worker);

}  // namespace idemgate::proxy
