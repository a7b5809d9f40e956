// Redaction before anything reaches the ledger: request snapshots and stored
// responses lose credentials (the default credential headers: Authorization,
// Proxy-Authorization, Cookie, Set-Cookie, X-Api-Key, Api-Key, X-Auth-Token
// and the others in redact.cpp, plus redact.headers), the values of
// credential query parameters (api_key, token, secret, sig, ... plus
// redact.query) and configured body fields (redact.body).
#pragma once

#include "config/config.hpp"
#include "ledger/types.hpp"

#include <boost/json/value.hpp>
#include <boost/system/error_code.hpp>

#include <string>
#include <string_view>

namespace idemgate::ledger {

inline constexpr std::string_view redacted_marker = "[redacted]";

// What the enforcement layer hands over about a request; the ledger stores
// only redact_request(...) of it.
struct RequestSnapshot {
  std::string method;
  std::string target;
  Headers headers;
  std::string body;
};

// Drops the default credential headers and the configured ones (names
// compared case-insensitively, '-', '_' and '.' ignored for the defaults).
Headers redact_headers(const Headers& headers, const config::Redact& rules);

// A request target ("/p?a=1&api_key=x" or an absolute URL) with the value of
// every credential query parameter replaced by "%5Bredacted%5D".
std::string redact_target(std::string_view target, const config::Redact& rules);

// JSON bodies: the value at each configured JSON pointer becomes "[redacted]".
// application/x-www-form-urlencoded bodies: the field named by the pointer
// (/a/b names a[b]) becomes "[redacted]". Other bodies are returned as is.
std::string redact_body(std::string_view body, std::string_view content_type,
                        const config::Redact& rules);

// The snapshot as JSON text ({"method","target","headers":[[n,v]...],"body"}),
// redacted; a JSON body is embedded as it was sent (when it is JSON by
// boost::json::parse's rules and nests at most 31 deep, so that the whole
// snapshot is within the parser's default depth of 32), any other as a
// string. Strings keep their bytes as sent, invalid UTF-8 included.
std::string redact_request(const RequestSnapshot& request, const config::Redact& rules);

// A snapshot redact_request wrote, read back (invalid UTF-8 in a header or a
// non-JSON body allowed); null with ec set when it does not parse.
boost::json::value parse_snapshot(std::string_view text, boost::system::error_code& ec);

// Headers and body redacted, body cut at `cap` bytes (truncated set).
StoredResponse redact_response(StoredResponse response, const config::Redact& rules,
                               std::uint64_t cap);

}  // namespace idemgate::ledger
