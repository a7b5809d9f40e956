// Forwarding one absolute-form request to its upstream and streaming the
// answer back: the proxy's pass-through path.
#pragma once

#include "config/config.hpp"
#include "ledger/executor.hpp"
#include "proxy/http_rules.hpp"
#include "proxy/stream.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

namespace idemgate::proxy {

class Worker;

struct ForwardResult {
  bool client_keep_alive = false;
};

// parser holds a complete request header; its body (if any) is still to be
// read from client (client_buffer first).
Task<ForwardResult> forward_request(
    ProxyStream& client, boost::beast::flat_buffer& client_buffer,
    boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser, const Target& target,
    const config::Config& cfg, Worker& worker);

}  // namespace idemgate::proxy
