// Syntax of the patterns a tool is written with: host globs, path patterns
// and JSON pointers. Each check returns what is wrong, or nullopt when the
// pattern is well formed, so the config loader can say why it refused it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idemgate::policy {

// "api.stripe.com", "*.stripe.com" (any subdomain, not the apex) or "*".
std::optional<std::string> host_glob_error(std::string_view glob);

// "/v1/charges" (exact), "/v1/*" (prefix), "/v1/customers/{id}/sources"
// ({name} matches one non-empty segment).
std::optional<std::string> path_pattern_error(std::string_view pattern);

// RFC 6901: "" or "/a/b", with "~0" for '~' and "~1" for '/'.
std::optional<std::string> json_pointer_error(std::string_view pointer);

// The unescaped reference tokens of a well-formed pointer ("/a~1b/c" -> {"a/b", "c"}).
std::vector<std::string> json_pointer_tokens(std::string_view pointer);

// The inverse: escapes and joins tokens into a pointer.
std::string json_pointer_from_tokens(const std::vector<std::string>& tokens);

// Does `host` (lowercase) match `glob`?
bool host_matches(std::string_view glob, std::string_view host) noexcept;

}  // namespace idemgate::policy
