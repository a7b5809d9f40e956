// Request targets as the proxy reads them: absolute-form ("http://host/p"),
// authority-form for CONNECT ("host:443") and gateway routes, each to one
// Target with its host in normal form. Sans-I/O: unit-tested on strings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace idemgate::proxy {

struct Target {
  std::string scheme;  // "http" or "https"
  std::string host;    // lowercased; IPv6 without brackets
  std::uint16_t port = 0;
  std::string origin_form;  // "/path?query", never empty
  bool host_is_ip = false;

  std::string authority() const;  // host[:port] as a Host header (default port dropped)
  void append_authority(std::string& out) const;
  std::string url() const;        // "scheme://" authority() origin_form, in one allocation
  std::string pool_key() const;   // "scheme://host:port"
};

// Parses an absolute-form request target ("http://host:port/path?q").
std::optional<Target> parse_absolute_target(std::string_view target);

namespace detail {
// parse_absolute_target's two readers, apart for the test that compares
// them. The plain one reads the spelling nearly every client sends
// (lowercase scheme and host name or a dotted quad, an optional port, a path
// and query of RFC 3986 characters) without Boost.URL, and answers nullopt
// for anything else, valid or not; the grammar one (Boost.URL) decides those.
// Whatever the plain one reads, the grammar one reads the same.
std::optional<Target> parse_plain_absolute_target(std::string_view target);
std::optional<Target> parse_absolute_target_by_grammar(std::string_view target);
}  // namespace detail

// Parses a CONNECT authority-form target ("host:port"; port required).
std::optional<Target> parse_authority_target(std::string_view target);

// A gateway route: when the origin-form target's path starts with `prefix`
// ("/stripe/"), the target on `upstream` ("https://api.stripe.com/v2/"):
// the upstream's path, then the rest of the request's path and its query
// ("/stripe/v1/charges?x=1" -> https://api.stripe.com/v2/v1/charges?x=1).
// nullopt when the prefix does not match or upstream is not a URL.
std::optional<Target> route_target(std::string_view prefix, std::string_view upstream, std::string_view origin);

}  // namespace idemgate::proxy
