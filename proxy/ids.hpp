// Identifiers and small encodings: idempotency keys, trace ids and base64 for
// Proxy-Authorization. Random bits come from the OS CSPRNG via OpenSSL.
#pragma once

#include <string>
#include <string_view>

namespace idemgate::proxy {

// An idempotency key: a UUIDv7 (RFC 9562), the minting millisecond then 74
// random bits. Keys minted later sort later, so the ledger's index of keys
// grows at one end instead of splitting pages all over.
std::string mint_uuid_v7();
std::string random_hex(std::size_t bytes);
std::string decode_base64(std::string_view text);  // "" when invalid

}  // namespace idemgate::proxy
