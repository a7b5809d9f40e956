// Percent-decoding of query strings and form bodies ('+' is a space; a
// malformed %-escape is kept as written), shared by match and fingerprint.
#pragma once

#include <string>
#include <string_view>

namespace idemgate::policy {

std::string form_decode(std::string_view raw);

// The value of a hex digit, -1 for any other character.
int hex_digit(char c) noexcept;

// form_decode(raw) == plain, without allocating.
bool form_decoded_equals(std::string_view raw, std::string_view plain) noexcept;

}  // namespace idemgate::policy
