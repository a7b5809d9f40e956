// Opening a connection to an upstream: asynchronous DNS (never blocking a
// network thread), a deadline on resolve+connect, and problems that say why.
#pragma once

#include "config/config.hpp"
#include "policy/egress.hpp"
#include "proxy/http_rules.hpp"
#include "proxy/problem.hpp"
#include "proxy/upstream_pool.hpp"
#include "ledger/executor.hpp"

#include <memory>
#include <optional>

namespace idemgate::proxy {

class Worker;

struct ConnectOutcome {
  std::unique_ptr<UpstreamConnection> connection;  // null when problem is set
  // 403 egress_denied (nothing sent), 502 upstream_connect_failed or
  // upstream_tls_failed, 504 upstream_connect_timeout
  std::optional<Problem> problem;
};

// egress.allow_hosts for the target's host (before any DNS).
policy::EgressVerdict check_egress_host(const Target& target, const config::Config& cfg);

// A new connection to target: plain TCP for http://, verified TLS (SNI, the
// host's name checked against the certificate) for https://. `raw`: TCP only
// whatever the scheme (a blind CONNECT tunnel carries the client's own TLS).
Task<ConnectOutcome> connect_upstream(const Target& target, const config::Config& cfg,
                                                        Worker& worker, bool raw = false);

}  // namespace idemgate::proxy
