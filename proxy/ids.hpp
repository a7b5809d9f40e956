// Identifiers and small encodings: idempotency keys, trace ids and base64 for
// Proxy-Authorization. Random bits come from the OS CSPRNG via OpenSSL.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace idemgate::proxy {

// An idempotency key: a UUIDv7 (RFC 9562), the minting millisecond then 74
// random bits. Keys minted in a later millisecond (of this clock) sort
// later, so the ledger's index of keys grows at one end instead of splitting
// pages all over.
std::string mint_uuid_v7();
// The UUIDv7 of Unix time `unix_ms` and `random` (its version and variant
// bits overwritten): mint_uuid_v7's layout, for tests.
std::string format_uuid_v7(std::uint64_t unix_ms, std::span<const unsigned char, 10> random);
std::string random_hex(std::size_t bytes);
std::string decode_base64(std::string_view text);  // "" when invalid

}  // namespace idemgate::proxy
