// HMAC-SHA256 as lowercase hex: the fingerprints' hash, and the proxy's
// signatures and constant-time comparisons.
#pragma once

#include <string>
#include <string_view>

namespace idemgate::policy {

// Empty only if OpenSSL fails. Each thread keeps the last key's context, so
// a run of calls under one key (every fingerprint of a process) fetches and
// keys SHA-256 once.
std::string hmac_sha256_hex(std::string_view key, std::string_view data);

}  // namespace idemgate::policy
