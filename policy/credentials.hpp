// Where the credentials an agent sent with a guarded call may be sent again
// by idemgate itself (the reconcile query asks the provider with the agent's
// Authorization / API key): only to the tool's own host, and only over HTTPS,
// so that a query URL pointing elsewhere, or at plain HTTP, never carries a
// secret off. A loopback address is allowed over plain HTTP (a provider on
// the same machine, and the tests).
#pragma once

#include "policy/tool.hpp"

#include <string_view>

namespace idemgate::policy {

// `request_host`: the host the guarded call went to (normalised, as matched);
// `query_scheme` / `query_host`: those of the expanded reconcile query URL.
// The tool's own host is request_host, or the host the tool's match names
// exactly. Pure; never throws.
bool may_forward_credentials(const Tool& tool, std::string_view request_host, std::string_view query_scheme,
                             std::string_view query_host) noexcept;

}  // namespace idemgate::policy
