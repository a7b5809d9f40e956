// Identifiers and small encodings: idempotency keys (UUIDv4 from the OS
// CSPRNG via OpenSSL), trace ids and base64 for Proxy-Authorization.
#pragma once

#include <string>
#include <string_view>

namespace idemgate::proxy {

std::string mint_uuid_v4();
std::string random_hex(std::size_t bytes);
std::string decode_base64(std::string_view text);  // "" when invalid

}  // namespace idemgate::proxy
