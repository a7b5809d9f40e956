// A borrowed view of HTTP headers for the pure policy functions: the caller
// (Beast on the wire side) lists name/value pairs; nothing is copied.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace idemgate::policy {

struct Header {
  std::string_view name;
  std::string_view value;
};

using HeaderView = std::span<const Header>;

// ASCII case-insensitive equality (header names, true/false tokens).
bool iequals(std::string_view a, std::string_view b) noexcept;

// The first header named `name` (case-insensitively), value trimmed of
// surrounding spaces and tabs.
std::optional<std::string_view> find_header(HeaderView headers, std::string_view name) noexcept;

// Every header named `name` as one value: each trimmed as find_header's,
// joined by ", " in the order sent (RFC 9110's combined field value), so
// that a recipient reading any copy reads part of it. Absent: nullopt.
std::optional<std::string> combined_header(HeaderView headers, std::string_view name);

// A Content-Type value's media type: without its parameters and the
// optional white space (spaces and tabs, RFC 9110's OWS) around it, in the
// case it was sent.
std::string_view media_type(std::string_view content_type) noexcept;
// Declared JSON: application/json or any +json type, in any case.
bool is_json_media_type(std::string_view content_type) noexcept;
// Declared a form: application/x-www-form-urlencoded, in any case.
bool is_form_media_type(std::string_view content_type) noexcept;

}  // namespace idemgate::policy
