// The egress guard: host globs and a table of resolved addresses, both
// families and IPv4 inside IPv6, under each combination of the allow flags.
#include "policy/egress.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>

#include <array>
#include <string>
#include <vector>

using namespace idemgate::policy;

TEST_CASE("check_host: globs from egress.allow_hosts") {
  const std::vector<std::string> stripe{"*.stripe.com", "api.github.com"};
  CHECK(check_host(stripe, "api.stripe.com").allowed);
  CHECK(check_host(stripe, "API.Stripe.COM.").allowed);
  CHECK(check_host(stripe, "files.api.stripe.com").allowed);
  CHECK(check_host(stripe, "api.github.com").allowed);
  CHECK_FALSE(check_host(stripe, "stripe.com").allowed);
  CHECK_FALSE(check_host(stripe, "evilstripe.com").allowed);
  CHECK_FALSE(check_host(stripe, "api.stripe.com.evil.net").allowed);
  CHECK_FALSE(check_host(stripe, "github.com").allowed);
  CHECK_FALSE(check_host(stripe, "").allowed);

  auto denied = check_host(stripe, "Evil.example");
  CHECK(denied.reason == "host 'evil.example' is not in egress.allow_hosts");

  const std::vector<std::string> all{"*"};
  CHECK(check_host(all, "anything.example").allowed);
  CHECK(check_host(all, "[::1]").allowed);  // the address check is separate
  CHECK_FALSE(check_host(std::vector<std::string>{}, "api.stripe.com").allowed);
}

namespace {

struct Row {
  const char* address;
  bool by_default;      // allow_private=false, allow_loopback=false
  bool with_private;    // allow_private=true
  bool with_loopback;   // allow_loopback=true
  const char* reason_part;  // expected in the default-rules denial
};

// clang-format off
const Row rows[] = {
  // public
  {"8.8.8.8",                     true,  true,  true,  ""},
  {"2606:4700:4700::1111",        true,  true,  true,  ""},
  {"100.63.255.255",              true,  true,  true,  ""},  // just below CGNAT
  {"172.32.0.1",                  true,  true,  true,  ""},  // just past 172.16/12
  {"::ffff:8.8.8.8",              true,  true,  true,  ""},
  // cloud metadata: always denied, even with allow_private
  {"169.254.169.254",             false, false, false, "cloud metadata"},
  {"::ffff:169.254.169.254",      false, false, false, "cloud metadata"},
  {"64:ff9b::a9fe:a9fe",          false, false, false, "cloud metadata"},  // NAT64 of 169.254.169.254
  {"fd00:ec2::254",               false, false, false, "cloud metadata"},
  {"100.100.100.200",             false, false, false, "cloud metadata"},
  // link-local: always
  {"169.254.1.1",                 false, false, false, "link-local"},
  {"fe80::1",                     false, false, false, "link-local"},
  {"febf:ffff::1",                false, false, false, "link-local"},
  // loopback: only with allow_loopback
  {"127.0.0.1",                   false, false, true,  "allow_loopback is false"},
  {"127.255.255.254",             false, false, true,  "loopback"},
  {"::1",                         false, false, true,  "loopback"},
  {"::ffff:127.0.0.1",            false, false, true,  "loopback"},
  // private: only with allow_private
  {"10.0.0.1",                    false, true,  false, "10.0.0.0/8"},
  {"172.16.0.1",                  false, true,  false, "172.16.0.0/12"},
  {"172.31.255.255",              false, true,  false, "172.16.0.0/12"},
  {"192.168.1.1",                 false, true,  false, "allow_private is false"},
  {"100.64.0.1",                  false, true,  false, "carrier-grade NAT"},
  {"100.127.255.255",             false, true,  false, "carrier-grade NAT"},
  {"fc00::1",                     false, true,  false, "unique local"},
  {"fd12:3456::1",                false, true,  false, "unique local"},
  {"::ffff:10.1.2.3",             false, true,  false, "10.0.0.0/8"},
  // never
  {"0.0.0.0",                     false, false, false, "this network"},
  {"::",                          false, false, false, "unspecified"},
  {"224.0.0.1",                   false, false, false, "multicast"},
  {"239.255.255.250",             false, false, false, "multicast"},
  {"ff02::1",                     false, false, false, "multicast"},
  {"255.255.255.255",             false, false, false, "broadcast"},
  {"240.0.0.1",                   false, false, false, "reserved"},
  {"::7f00:1",                    false, false, false, "IPv4-compatible"},
};
// clang-format on

}  // namespace

TEST_CASE("check_address: the address table under each rule set") {
  for (const Row& row : rows) {
    CAPTURE(row.address);
    auto by_default = check_address(std::string_view(row.address), AddressRules{});
    CHECK(by_default.allowed == row.by_default);
    CHECK(by_default.reason.empty() == row.by_default);
    CHECK(by_default.reason.find(row.reason_part) != std::string::npos);
    CHECK(check_address(std::string_view(row.address), AddressRules{true, false}).allowed ==
          row.with_private);
    CHECK(check_address(std::string_view(row.address), AddressRules{false, true}).allowed ==
          row.with_loopback);
  }
}

TEST_CASE("check_address takes the bytes a resolver returns") {
  const std::array<std::uint8_t, 4> metadata{169, 254, 169, 254};
  auto verdict = check_address(metadata, AddressRules{true, true});
  CHECK_FALSE(verdict.allowed);
  CHECK(verdict.reason == "169.254.169.254 is a cloud metadata address");

  std::array<std::uint8_t, 16> mapped{};
  REQUIRE(inet_pton(AF_INET6, "::ffff:192.168.0.10", mapped.data()) == 1);
  auto v = check_address(mapped, AddressRules{});
  CHECK_FALSE(v.allowed);
  CHECK(v.reason.find("::ffff:192.168.0.10 (IPv4 192.168.0.10)") != std::string::npos);
  CHECK(check_address(mapped, AddressRules{true, false}).allowed);

  const std::array<std::uint8_t, 3> odd{1, 2, 3};
  CHECK_FALSE(check_address(odd, AddressRules{true, true}).allowed);
}

TEST_CASE("check_address: brackets accepted, non-addresses denied") {
  CHECK(check_address(std::string_view("[2606:4700:4700::1111]"), AddressRules{}).allowed);
  auto bad = check_address(std::string_view("api.stripe.com"), AddressRules{true, true});
  CHECK_FALSE(bad.allowed);
  CHECK(bad.reason.find("not an IP address") != std::string::npos);
}
