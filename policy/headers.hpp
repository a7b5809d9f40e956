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

// Every header named `name` as one string: each value trimmed as
// find_header's, in the order sent, joined by LF. A field value cannot hold
// an LF, so two copies never read as one value, whichever copy a recipient
// takes (`A: x, y` once is not `A: x` then `A: y`); one copy is its value.
// Absent: nullopt.
std::optional<std::string> header_values(HeaderView headers, std::string_view name);

// A Content-Type value's media type: without its parameters and the
// optional white space (spaces and tabs, RFC 9110's OWS) around it, in the
// case it was sent.
std::string_view media_type(std::string_view content_type) noexcept;
// Declared JSON: application/json or any +json type, in any case.
bool is_json_media_type(std::string_view content_type) noexcept;
// Declared a form: application/x-www-form-urlencoded, in any case.
bool is_form_media_type(std::string_view content_type) noexcept;

}  // namespace idemgate::policy
