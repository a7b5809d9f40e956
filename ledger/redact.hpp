// Redaction before anything reaches the ledger: request snapshots and stored
// responses lose credentials (Authorization, Proxy-Authorization, Cookie,
// Set-Cookie, the configured headers) and configured body fields.
#pragma once

#include "config/config.hpp"
#include "ledger/types.hpp"

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

// Drops the always-secret headers and the configured ones (case-insensitive).
Headers redact_headers(const Headers& headers, const config::Redact& rules);

// JSON bodies: the value at each configured JSON pointer becomes "[redacted]".
// application/x-www-form-urlencoded bodies: the field named by the pointer
// (/a/b names a[b]) becomes "[redacted]". Other bodies are returned as is.
std::string redact_body(std::string_view body, std::string_view content_type,
                        const config::Redact& rules);

// The snapshot as JSON text ({"method","target","headers":[[n,v]...],"body"}),
// redacted; a JSON body is embedded as JSON, any other as a string.
std::string redact_request(const RequestSnapshot& request, const config::Redact& rules);

// Headers and body redacted, body cut at `cap` bytes (truncated set).
StoredResponse redact_response(StoredResponse response, const config::Redact& rules,
                               std::uint64_t cap);

}  // namespace idemgate::ledger
