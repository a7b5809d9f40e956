// Things a valid config allows but an operator most likely did not mean,
// printed by check-config and logged at start and on reload.
#pragma once

#include "config/config.hpp"

#include <vector>

namespace idemgate::config {

// One ConfigError-shaped warning per finding (file:line of the key).
// Today: tools reachable over HTTPS (port 443 or any) while tls.intercept is
// off: a CONNECT to their host is refused 403 intercept_required.
std::vector<ConfigError> warnings(const Config&);

}  // namespace idemgate::config
