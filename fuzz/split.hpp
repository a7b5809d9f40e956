// Fuzz inputs that carry more than one field: fields are separated by
// newlines, so seeds stay readable text files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace idemgate::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The text up to the first '\n' (removed from `rest`), or all of it.
inline std::string_view take_line(std::string_view& rest) {
  const auto end = rest.find('\n');
  const auto line = rest.substr(0, end);
  rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
  return line;
}

}  // namespace idemgate::fuzz
