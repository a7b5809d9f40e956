// One decoding loop serves both the allocating and the comparing form.
#include "policy/percent.hpp"

namespace idemgate::policy {

int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

namespace {

// Calls emit(char) for each decoded character; stops early when it returns false.
template <class Emit>
bool decode_each(std::string_view raw, Emit emit) {
  for (std::size_t i = 0; i < raw.size(); ++i) {
    char c = raw[i];
    if (c == '+') {
      c = ' ';
    } else if (c == '%' && i + 2 < raw.size() && hex_digit(raw[i + 1]) >= 0 && hex_digit(raw[i + 2]) >= 0) {
      c = static_cast<char>(hex_digit(raw[i + 1]) * 16 + hex_digit(raw[i + 2]));
      i += 2;
    }
    if (!emit(c)) return false;
  }
  return true;
}

}  // namespace

std::string form_decode(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  decode_each(raw, [&](char c) {
    out += c;
    return true;
  });
  return out;
}

bool form_decoded_equals(std::string_view raw, std::string_view plain) noexcept {
  std::size_t j = 0;
  const bool same_prefix = decode_each(raw, [&](char c) { return j < plain.size() && plain[j++] == c; });
  return same_prefix && j == plain.size();
}

}  // namespace idemgate::policy
