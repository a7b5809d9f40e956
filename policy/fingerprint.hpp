// The fingerprint of a write: what makes two requests "the same intent".
// HMAC-SHA256 (hex) under the deployment's fingerprint key, so that a
// fingerprint in a log or a package says nothing about the body it was made
// of (a card number cannot be guessed back from it), over a canonical form of
//   tool name, method, normalised target (normalize.hpp, the same form the
//   matcher reads: host lowercased without a trailing dot, default port
//   dropped, unreserved escapes decoded, dot and empty segments resolved;
//   query parameters decoded and sorted with the tool's
//   fingerprint.ignore_query removed), the tool's fingerprint.headers (never
//   the idempotency key header; one sent more than once with every copy),
//   and the body:
//     JSON (application/json, */*+json): keys sorted, numbers normalised
//       (1.0 == 1, 1e2 == 100, decimals correctly rounded: json_parse.hpp),
//       strings exact;
//     application/x-www-form-urlencoded: Stripe bracket keys
//       (metadata[order]=7 is /metadata/order), percent-encoding decoded,
//       '+' as space, pairs sorted by key (order among one key's repeats,
//       a[]=1&a[]=2, is kept: it is a list);
//     anything else: the raw bytes.
//   fingerprint.ignore pointers are removed first. For MCP tools a
//   tools/call body counts only as params.name + canonical params.arguments
//   (policy/mcp.hpp): never the JSON-RPC id or params._meta.
// A body declared JSON that does not parse is hashed as raw bytes and flagged
// malformed; nothing here throws.
#pragma once

#include "policy/headers.hpp"
#include "policy/tool.hpp"

#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idemgate::policy {

struct FingerprintInput {
  std::string_view method;
  std::string_view scheme = "https";  // "http" or "https": decides the default port
  std::string_view host;
  std::uint16_t port = 0;             // 0: the scheme's default
  std::string_view target;            // origin-form: "/v1/charges?expand[]=x"
  std::string_view content_type;      // the Content-Type header value, may be empty
  std::string_view body;
  HeaderView headers{};               // all request headers; only the configured ones are read
  std::string_view key{};             // the HMAC key (ledger.fingerprint_key_file); every process of one ledger has the same
};

enum class BodyKind { empty, json, form, raw };

struct Fingerprint {
  std::string hex;         // 64 lowercase hex digits; empty only if it could not be computed (out of memory)
  BodyKind body_kind = BodyKind::empty;
  bool malformed = false;  // declared JSON but did not parse: hashed as raw bytes
  // Parsed JSON in which some object names a member twice (kept: the last).
  // Servers differ on which of the two they read, and the canonical form
  // keeps one, so the call has no single reading: refused for a write
  // before anything is sent (proxy/intake.cpp). A form needs no such flag:
  // its canonical form keeps every pair, and a repeated key is a list to
  // many servers (Twilio's MediaUrl=..&MediaUrl=..).
  bool repeated_names = false;
  // The body as JSON (form bodies as nested objects of strings), before
  // `ignore` is applied, for `require:` checks and templates; null otherwise.
  std::optional<boost::json::value> body;
};

Fingerprint fingerprint(const FingerprintInput& input, const Tool& tool) noexcept;

// The canonical text of a JSON value (sorted keys, normalised numbers).
std::string canonical_json(const boost::json::value& value);

// A form body as (pointer, value) pairs in body order, decoded.
struct FormPair {
  std::string pointer;  // "/metadata/order"; "a[]" gives "/a/"
  std::string value;
};
std::vector<FormPair> parse_form(std::string_view body);

// `require:` pointers absent from the parsed body (all of them when there is
// no parsed body): the input of a missing_slot verdict.
std::vector<std::string> missing_required(const Tool& tool, const boost::json::value* body);

}  // namespace idemgate::policy
