// A string as JSON text, escaped exactly as Boost.JSON's serializer escapes
// it (quote, backslash and control characters; every other byte as is, so
// UTF-8 stays as sent), for the code that writes JSON without building a
// document: the ledger's stored text and the fingerprint's canonical form,
// whose bytes must not change.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace idemgate::policy {

// Eight bytes at a time (a word loaded with memcpy): which bytes of w need
// an escape. Each is nonzero when some byte does; its lowest set bit is in
// the first such byte (a false flag needs a borrow from a flagged byte below
// it), which first_flagged gives on a little-endian machine.
namespace swar {
inline constexpr std::uint64_t ones = 0x0101010101010101ull;
inline constexpr std::uint64_t highs = 0x8080808080808080ull;
// Bytes of w below n (n <= 128).
constexpr std::uint64_t below(std::uint64_t w, unsigned n) { return (w - ones * n) & ~w & highs; }
// Bytes of w equal to b.
constexpr std::uint64_t equal(std::uint64_t w, unsigned char b) { return below(w ^ (ones * b), 1); }
// The index of the first flagged byte of nonzero `flags`, as loaded on a
// little-endian machine.
constexpr std::size_t first_flagged(std::uint64_t flags) { return static_cast<std::size_t>(std::countr_zero(flags)) / 8; }
}  // namespace swar

// s as a JSON string (quotes included) appended to out.
void append_json_string(std::string& out, std::string_view s);

}  // namespace idemgate::policy
