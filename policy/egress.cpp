// Host allow-list globs and the address classes the SSRF guard denies.
#include "policy/egress.hpp"

#include "policy/pattern.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>

namespace idemgate::policy {

namespace {

std::string_view trim_host(std::string_view h) {
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (!h.empty() && h.back() == '.') h.remove_suffix(1);
  return h;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

enum class Kind { unspecified, metadata, link_local, multicast, broadcast, reserved, loopback, private_range };

struct Range {
  std::array<std::uint8_t, 16> prefix;  // first 4 bytes used for IPv4
  int bits;
  Kind kind;
  const char* name;
};

// First match wins: the metadata addresses sit inside ranges that
// allow_private would open, and must stay closed regardless.
constexpr Range v4_ranges[] = {
    {{169, 254, 169, 254}, 32, Kind::metadata, "169.254.169.254 (cloud metadata)"},
    {{100, 100, 100, 200}, 32, Kind::metadata, "100.100.100.200 (cloud metadata)"},
    {{0, 0, 0, 0}, 8, Kind::unspecified, "0.0.0.0/8 (this network)"},
    {{169, 254, 0, 0}, 16, Kind::link_local, "169.254.0.0/16 (link-local)"},
    {{224, 0, 0, 0}, 4, Kind::multicast, "224.0.0.0/4 (multicast)"},
    {{255, 255, 255, 255}, 32, Kind::broadcast, "255.255.255.255 (broadcast)"},
    {{240, 0, 0, 0}, 4, Kind::reserved, "240.0.0.0/4 (reserved)"},
    {{127, 0, 0, 0}, 8, Kind::loopback, "127.0.0.0/8 (loopback)"},
    {{10, 0, 0, 0}, 8, Kind::private_range, "10.0.0.0/8 (private)"},
    {{172, 16, 0, 0}, 12, Kind::private_range, "172.16.0.0/12 (private)"},
    {{192, 168, 0, 0}, 16, Kind::private_range, "192.168.0.0/16 (private)"},
    {{100, 64, 0, 0}, 10, Kind::private_range, "100.64.0.0/10 (carrier-grade NAT)"},
};

constexpr Range v6_ranges[] = {
    {{0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54}, 128, Kind::metadata,
     "fd00:ec2::254 (cloud metadata)"},
    {{}, 128, Kind::unspecified, ":: (unspecified)"},
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, Kind::loopback, "::1 (loopback)"},
    // IPv4-compatible addresses are deprecated and never legitimately routed.
    {{}, 96, Kind::reserved, "::/96 (IPv4-compatible, deprecated)"},
    {{0xfe, 0x80}, 10, Kind::link_local, "fe80::/10 (link-local)"},
    {{0xff}, 8, Kind::multicast, "ff00::/8 (multicast)"},
    {{0xfc}, 7, Kind::private_range, "fc00::/7 (unique local)"},
    {{0xfe, 0xc0}, 10, Kind::private_range, "fec0::/10 (site-local, deprecated)"},
};

bool in_range(std::span<const std::uint8_t> addr, const Range& r) {
  int full = r.bits / 8;
  if (!std::equal(addr.begin(), addr.begin() + full, r.prefix.begin())) return false;
  int rest = r.bits % 8;
  if (rest == 0) return true;
  auto mask = static_cast<std::uint8_t>(0xff << (8 - rest));
  return (addr[full] & mask) == (r.prefix[full] & mask);
}

// The IPv4 address a v6 one carries where a v4 check must apply.
bool embedded_v4(std::span<const std::uint8_t> v6, std::array<std::uint8_t, 4>& v4) {
  static constexpr std::array<std::uint8_t, 12> mapped{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static constexpr std::array<std::uint8_t, 12> nat64{0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  bool carries = std::equal(mapped.begin(), mapped.end(), v6.begin()) ||
                 std::equal(nat64.begin(), nat64.end(), v6.begin());
  if (carries) std::copy(v6.begin() + 12, v6.end(), v4.begin());
  return carries;
}

std::string address_text(std::span<const std::uint8_t> bytes) {
  std::array<char, INET6_ADDRSTRLEN> buf{};
  int family = bytes.size() == 4 ? AF_INET : AF_INET6;
  return inet_ntop(family, bytes.data(), buf.data(), buf.size()) ? buf.data() : "?";
}

EgressVerdict judge(const std::string& shown, const Range& r, AddressRules rules) {
  if (r.kind == Kind::loopback && rules.allow_loopback) return {};
  if (r.kind == Kind::private_range && rules.allow_private) return {};
  std::string why = r.kind == Kind::metadata ? shown + " is a cloud metadata address"
                                            : shown + " is in " + r.name;
  if (r.kind == Kind::loopback) why += "; egress.allow_loopback is false";
  if (r.kind == Kind::private_range) why += "; egress.allow_private is false";
  return {false, why};
}

}  // namespace

EgressVerdict check_host(std::span<const std::string> allow_hosts, std::string_view host) {
  const std::string name = lower(trim_host(host));
  if (!name.empty()) {
    for (const auto& glob : allow_hosts)
      if (host_matches(lower(glob), name)) return {};
  }
  return {false, "host '" + name + "' is not in egress.allow_hosts"};
}

EgressVerdict check_address(std::span<const std::uint8_t> bytes, AddressRules rules) {
  if (bytes.size() != 4 && bytes.size() != 16) return {false, "not an IPv4 or IPv6 address"};
  std::string shown = address_text(bytes);
  std::array<std::uint8_t, 4> v4{};
  std::span<const std::uint8_t> checked = bytes;
  if (bytes.size() == 16 && embedded_v4(bytes, v4)) {
    checked = v4;
    shown += " (IPv4 " + address_text(v4) + ")";
  }
  if (checked.size() == 4) {
    for (const Range& r : v4_ranges)
      if (in_range(checked, r)) return judge(shown, r, rules);
  } else {
    for (const Range& r : v6_ranges)
      if (in_range(checked, r)) return judge(shown, r, rules);
  }
  return {};
}

EgressVerdict check_address(std::string_view literal, AddressRules rules) {
  std::string text(trim_host(literal));
  std::array<std::uint8_t, 16> bytes{};
  if (inet_pton(AF_INET, text.c_str(), bytes.data()) == 1)
    return check_address(std::span<const std::uint8_t>(bytes.data(), 4), rules);
  if (inet_pton(AF_INET6, text.c_str(), bytes.data()) == 1)
    return check_address(std::span<const std::uint8_t>(bytes), rules);
  return {false, "'" + text + "' is not an IP address"};
}

}  // namespace idemgate::policy
