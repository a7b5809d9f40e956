// Case-insensitive header lookup over a borrowed list.
#include "policy/headers.hpp"

namespace idemgate::policy {

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::optional<std::string_view> find_header(HeaderView headers, std::string_view name) noexcept {
  for (const auto& header : headers) {
    if (!iequals(header.name, name)) continue;
    auto value = header.value;
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    return value;
  }
  return std::nullopt;
}

}  // namespace idemgate::policy
