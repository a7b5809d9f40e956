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

namespace {

std::string_view trim_ows(std::string_view value) noexcept {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return value;
}

}  // namespace

std::optional<std::string_view> find_header(HeaderView headers, std::string_view name) noexcept {
  for (const auto& header : headers)
    if (iequals(header.name, name)) return trim_ows(header.value);
  return std::nullopt;
}

std::optional<std::string> header_values(HeaderView headers, std::string_view name) {
  std::optional<std::string> values;
  for (const auto& header : headers) {
    if (!iequals(header.name, name)) continue;
    if (values)
      *values += '\n';
    else
      values.emplace();
    *values += trim_ows(header.value);
  }
  return values;
}

std::string_view media_type(std::string_view content_type) noexcept {
  return trim_ows(content_type.substr(0, content_type.find(';')));
}

bool is_json_media_type(std::string_view content_type) noexcept {
  auto const type = media_type(content_type);
  return iequals(type, "application/json") || (type.size() > 5 && iequals(type.substr(type.size() - 5), "+json"));
}

bool is_form_media_type(std::string_view content_type) noexcept {
  return iequals(media_type(content_type), "application/x-www-form-urlencoded");
}

}  // namespace idemgate::policy
