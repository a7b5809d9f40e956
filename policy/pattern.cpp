// Host globs, path patterns and JSON pointers: syntax checks and the small
// helpers the matcher and fingerprint share.
#include "policy/pattern.hpp"

namespace idemgate::policy {
namespace {

// Built piecewise: GCC 12 warns (-Wrestrict, a false positive) on "'" + s + "'".
std::string quote(std::string_view text) {
  std::string out(1, '\'');
  out += text;
  out += '\'';
  return out;
}


bool is_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

bool is_param_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

std::optional<std::string> host_glob_error(std::string_view glob) {
  const std::string quoted = quote(glob);
  if (glob.empty()) return "empty host";
  if (glob == "*") return std::nullopt;
  std::string_view name = glob;
  if (name.starts_with("*.")) name.remove_prefix(2);
  for (char c : name) {
    if (c == '*') return "bad host glob " + quoted + ": '*' is allowed only as the first label, as in *.example.com";
    if (c >= 'A' && c <= 'Z') return "bad host " + quoted + ": write it in lowercase";
    if (!is_host_char(c)) return "bad host " + quoted + ": unexpected character '" + std::string(1, c) + "'";
  }
  if (name.empty() || name.front() == '.' || name.back() == '.' ||
      name.find("..") != std::string_view::npos)
    return "bad host " + quoted + ": empty label";
  return std::nullopt;
}

std::optional<std::string> path_pattern_error(std::string_view pattern) {
  const std::string quoted = quote(pattern);
  if (pattern.empty() || pattern.front() != '/') return "bad path pattern " + quoted + ": must start with '/'";
  if (pattern.find_first_of("?#") != std::string_view::npos)
    return "bad path pattern " + quoted + ": no query or fragment in a path";
  const auto star = pattern.find('*');
  if (star != std::string_view::npos && star != pattern.size() - 1)
    return "bad path pattern " + quoted + ": '*' is allowed only at the end (a prefix)";
  std::size_t begin = 1;
  while (begin <= pattern.size()) {
    auto end = pattern.find('/', begin);
    if (end == std::string_view::npos) end = pattern.size();
    const auto segment = pattern.substr(begin, end - begin);
    const bool has_brace = segment.find_first_of("{}") != std::string_view::npos;
    if (has_brace) {
      if (segment.size() < 3 || segment.front() != '{' || segment.back() != '}')
        return "bad path pattern " + quoted + ": a {param} must be a whole segment";
      for (char c : segment.substr(1, segment.size() - 2))
        if (!is_param_char(c)) return "bad path pattern " + quoted + ": bad parameter name in " + std::string(segment);
      if (star != std::string_view::npos) return "bad path pattern " + quoted + ": do not mix {param} and '*'";
    }
    begin = end + 1;
  }
  return std::nullopt;
}

std::optional<std::string> json_pointer_error(std::string_view pointer) {
  const std::string quoted = quote(pointer);
  if (pointer.empty()) return std::nullopt;
  if (pointer.front() != '/') return "bad JSON pointer " + quoted + ": must start with '/'";
  for (std::size_t i = 0; i < pointer.size(); ++i) {
    if (pointer[i] != '~') continue;
    if (i + 1 >= pointer.size() || (pointer[i + 1] != '0' && pointer[i + 1] != '1'))
      return "bad JSON pointer " + quoted + ": '~' must be followed by 0 or 1";
  }
  return std::nullopt;
}

std::vector<std::string> json_pointer_tokens(std::string_view pointer) {
  std::vector<std::string> tokens;
  if (pointer.empty()) return tokens;
  std::string current;
  for (std::size_t i = 1; i < pointer.size(); ++i) {
    const char c = pointer[i];
    if (c == '/') {
      tokens.push_back(std::move(current));
      current.clear();
    } else if (c == '~' && i + 1 < pointer.size()) {
      current += pointer[++i] == '1' ? '/' : '~';
    } else {
      current += c;
    }
  }
  tokens.push_back(std::move(current));
  return tokens;
}

std::string json_pointer_from_tokens(const std::vector<std::string>& tokens) {
  std::string out;
  for (const auto& token : tokens) {
    out += '/';
    for (char c : token) {
      if (c == '~') out += "~0";
      else if (c == '/') out += "~1";
      else out += c;
    }
  }
  return out;
}

bool host_matches(std::string_view glob, std::string_view host) noexcept {
  if (glob == "*") return true;
  if (glob.starts_with("*.")) {
    const auto suffix = glob.substr(1);  // ".stripe.com"
    return host.size() > suffix.size() && host.ends_with(suffix);
  }
  return glob == host;
}

}  // namespace idemgate::policy
