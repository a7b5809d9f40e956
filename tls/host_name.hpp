// The canonical form of a host a certificate is minted for or verified
// against: what the leaf cache is keyed by and what goes into a SAN.
#pragma once

#include "tls/openssl_ptr.hpp"

#include <string>
#include <string_view>

namespace idemgate::tls {

struct HostName {
  std::string name;    // lower case, no brackets, no trailing dot; IPs in inet_ntop form
  bool is_ip = false;  // an IPv4 or IPv6 literal: SAN IP, no SNI
};

// Accepts "api.example.com", "API.Example.com.", "10.0.0.1", "::1", "[::1]".
// Refuses what cannot be a certificate name (empty, too long, wildcards,
// spaces, zone ids) so no caller puts it into a certificate or a handshake.
Result<HostName> parse_host(std::string_view host);

}  // namespace idemgate::tls
