// What a CONNECT gets, decided before any byte of the tunnel is read
// (sans-I/O): interception (the same pipeline then runs on the requests
// inside), a blind tunnel, or a refusal. A host that has tools is never
// tunnelled blind: with interception off the CONNECT is refused 403
// intercept_required, so no write reaches a tool's provider unguarded.
#pragma once

#include "config/config.hpp"
#include "proxy/http_rules.hpp"
#include "proxy/problem.hpp"

#include <optional>
#include <string>
#include <vector>

namespace idemgate::proxy {

enum class ConnectAction { intercept, tunnel, refuse };

struct ConnectPlan {
  ConnectAction action = ConnectAction::tunnel;
  std::optional<Problem> problem;  // set for refuse
};

// Names of the tools whose host (and port, when set) the CONNECT target is.
std::vector<std::string> tools_on(const config::Config&, const Target&);

// can_intercept: tls.intercept is on and the CA was loaded at start.
ConnectPlan plan_connect(const config::Config&, const Target&, bool can_intercept);

// Once the CONNECT is answered 200: is the client's first byte the start of
// a TLS handshake record (0x16)? Anything else is served as plain HTTP
// (undici's ProxyAgent tunnels http:// URLs by default).
constexpr bool starts_tls_handshake(unsigned char first_byte) noexcept { return first_byte == 0x16; }

}  // namespace idemgate::proxy
