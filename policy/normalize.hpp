// The one normalisation of a request target that matching and the
// fingerprint both read, so that every spelling of a resource is the same
// resource to the gate (RFC 3986 section 6.2.2, plus what servers commonly
// do beyond it):
//   host:  lowercase, one trailing dot dropped, %XX of unreserved decoded;
//   port:  the scheme's default dropped (http 80, https 443);
//   path:  %XX of unreserved characters decoded (%63 is 'c'), other escapes
//          upper-cased (%2f is %2F), characters that are not allowed raw
//          escaped, "." and ".." segments resolved (never above the root),
//          empty segments dropped ("//" and a trailing '/'), "/" when empty;
//   query: escapes as for the path, pairs in their order (matching and the
//          fingerprint decode names and values themselves).
// Some spellings have no single reading: servers disagree on whether %2F,
// %5C or a '\' separate segments, and on whether ";params" belong to a
// segment. Those keep their escaped primary reading and also carry the other
// readings (`alternates`), so the matcher can refuse a request that another
// reading would make a write (see match_target in match.hpp).
// Pure, allocation only; nothing here throws except std::bad_alloc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idemgate::policy {

// nullopt when the host cannot name a DNS host or an address after decoding
// (an escape of a character that is not unreserved, or nothing left).
std::optional<std::string> normalize_host(std::string_view host);

struct NormalPath {
  std::string path;                     // always starts with '/'
  std::vector<std::string> alternates;  // other readings of an ambiguous spelling, each != path
};

// `raw` is the path part of an origin-form target (before '?').
NormalPath normalize_path(std::string_view raw);

std::string normalize_query(std::string_view raw);

// A tool's path pattern in the same form: dot and empty segments as for a
// path ("/v1//x/" is "/v1/x"); a prefix keeps its trailing '/' ("/v1/*").
std::string normalize_path_pattern(std::string_view pattern);

struct NormalTarget {
  std::string scheme;     // lowercase
  std::string host;       // empty when normalize_host refused the host
  std::uint16_t port = 0; // 0: the scheme's default
  NormalPath path;
  std::optional<std::string> query;  // without the '?'; nullopt: no '?'
};

// `port` 0 means the scheme's default; `origin_form` is "/path?query".
NormalTarget normalize_target(std::string_view scheme, std::string_view host, std::uint16_t port,
                              std::string_view origin_form);

}  // namespace idemgate::policy
