// JSON strings as Boost.JSON writes them (see json_string.hpp).
#include "policy/json_string.hpp"

#include <cstring>

namespace idemgate::policy {

namespace {

// The length of s's longest prefix that JSON needs no escape for, read eight
// bytes at a time (header names and values seldom have any).
std::size_t plain_json_prefix(std::string_view s) {
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, sizeof w);
    if (swar::below(w, 0x20) | swar::equal(w, '"') | swar::equal(w, '\\')) break;
  }
  for (; i < s.size(); ++i) {
    auto const c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == '"' || c == '\\') break;
  }
  return i;
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (;;) {
    auto const plain = plain_json_prefix(s);
    out.append(s.data(), plain);
    if (plain == s.size()) break;
    auto const c = static_cast<unsigned char>(s[plain]);
    s.remove_prefix(plain + 1);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 0xf];
    }
  }
  out += '"';
}

}  // namespace idemgate::policy
