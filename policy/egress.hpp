// The egress guard: which hosts the proxy may reach (config egress.allow_hosts)
// and which resolved addresses it must never connect to (SSRF: link-local,
// cloud metadata, loopback and private ranges unless allowed). Pure: the
// caller resolves asynchronously and hands the bytes of each address here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace idemgate::policy {

struct EgressVerdict {
  bool allowed = true;
  std::string reason;  // for the egress_denied problem detail; empty when allowed
};

// config egress.allow_private / egress.allow_loopback.
struct AddressRules {
  bool allow_private = false;
  bool allow_loopback = false;
};

// Allowed when some glob of egress.allow_hosts matches (policy::host_matches:
// "*.stripe.com" matches "api.stripe.com", not "stripe.com"; "*" matches
// all), case-insensitively, ignoring a trailing dot and IPv6 brackets.
EgressVerdict check_host(std::span<const std::string> allow_hosts, std::string_view host);

// `bytes`: 4 (IPv4) or 16 (IPv6, network order), as from
// address_v4::to_bytes() / address_v6::to_bytes(). IPv4-mapped (::ffff:a.b.c.d)
// and NAT64 (64:ff9b::a.b.c.d) addresses are judged as the IPv4 inside.
// Unspecified, metadata, link-local, multicast, broadcast and reserved
// addresses are always denied; loopback and private ranges unless allowed.
EgressVerdict check_address(std::span<const std::uint8_t> bytes, AddressRules rules);

// The same for an address literal ("10.0.0.1", "::1", "[fe80::1]"); text
// that is not an address is denied.
EgressVerdict check_address(std::string_view literal, AddressRules rules);

}  // namespace idemgate::policy
