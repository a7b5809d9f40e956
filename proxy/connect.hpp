// Opening a connection to an upstream: asynchronous DNS (never blocking a
// network thread), a deadline on resolve+connect, and problems that say why.
#pragma once

#include "config/config.hpp"
#include "proxy/http_rules.hpp"
#include "proxy/problem.hpp"
#include "proxy/upstream_pool.hpp"

#include <boost/asio/awaitable.hpp>

#include <memory>
#include <optional>

namespace idemgate::proxy {

class Worker;

struct ConnectOutcome {
  std::unique_ptr<UpstreamConnection> connection;  // null when problem is set
  std::optional<Problem> problem;                   // 502 upstream_connect_failed / 504 upstream_connect_timeout
};

boost::asio::awaitable<ConnectOutcome> connect_upstream(const Target& target, const config::Config& cfg,
                                                        Worker& worker);

}  // namespace idemgate::proxy
