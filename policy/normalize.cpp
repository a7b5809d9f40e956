// Percent-encoding, dot and empty segments, and the ambiguous spellings
// (see normalize.hpp for the rules).
#include "policy/normalize.hpp"

#include "policy/percent.hpp"

#include <algorithm>

namespace idemgate::policy {
namespace {

bool is_unreserved(unsigned char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

bool is_sub_delim(unsigned char c) noexcept {
  return c == '!' || c == '$' || c == '&' || c == '\'' || c == '(' || c == ')' || c == '*' || c == '+' ||
         c == ',' || c == ';' || c == '=';
}

char to_lower(char c) noexcept { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

void append_escape(std::string& out, unsigned char c) {
  static constexpr char digits[] = "0123456789ABCDEF";
  out += '%';
  out += digits[c >> 4];
  out += digits[c & 0xf];
}

// The escape pass: unreserved escapes decoded, every other byte that is not
// allowed raw escaped in upper case. Returns whether the text held a
// separator that servers read in two ways (%2F, %5C, '\' or ';' in a path).
bool append_escaped(std::string& out, std::string_view raw, bool path) {
  bool ambiguous = false;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    auto c = static_cast<unsigned char>(raw[i]);
    if (c == '%' && i + 2 < raw.size() && hex_digit(raw[i + 1]) >= 0 && hex_digit(raw[i + 2]) >= 0) {
      c = static_cast<unsigned char>(hex_digit(raw[i + 1]) * 16 + hex_digit(raw[i + 2]));
      i += 2;
      if (is_unreserved(c)) {
        out += static_cast<char>(c);
      } else {
        if (path && (c == '/' || c == '\\')) ambiguous = true;
        append_escape(out, c);
      }
      continue;
    }
    bool const raw_ok = is_unreserved(c) || is_sub_delim(c) || c == ':' || c == '@' || c == '/' || (!path && c == '?');
    if (path && (c == '\\' || c == ';')) ambiguous = true;
    if (raw_ok) out += static_cast<char>(c);
    else append_escape(out, c);  // a malformed escape's '%' becomes %25: a literal percent sign
  }
  return ambiguous;
}

// Dot segments resolved and empty segments dropped over an escaped path.
std::string resolve_segments(std::string_view escaped) {
  std::vector<std::string_view> kept;
  std::size_t begin = 0;
  while (begin <= escaped.size()) {
    auto end = escaped.find('/', begin);
    if (end == std::string_view::npos) end = escaped.size();
    auto const segment = escaped.substr(begin, end - begin);
    if (segment == "..") {
      if (!kept.empty()) kept.pop_back();
    } else if (!segment.empty() && segment != ".") {
      kept.push_back(segment);
    }
    begin = end + 1;
  }
  if (kept.empty()) return "/";
  std::string out;
  for (auto segment : kept) {
    out += '/';
    out += segment;
  }
  return out;
}

// %2F and %5C as separators.
std::string with_escaped_separators(std::string_view escaped) {
  std::string out;
  out.reserve(escaped.size());
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] == '%' && i + 2 < escaped.size() &&
        (escaped.substr(i, 3) == "%2F" || escaped.substr(i, 3) == "%5C")) {
      out += '/';
      i += 2;
    } else {
      out += escaped[i];
    }
  }
  return out;
}

// Each segment cut at its first ';' (servlet-style path parameters).
std::string without_path_params(std::string_view escaped) {
  std::string out;
  out.reserve(escaped.size());
  bool in_params = false;
  for (char c : escaped) {
    if (c == '/') in_params = false;
    else if (c == ';') in_params = true;
    if (!in_params) out += c;
  }
  return out;
}

}  // namespace

std::optional<std::string> normalize_host(std::string_view host) {
  std::string out;
  out.reserve(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    char c = host[i];
    if (c == '%') {
      if (i + 2 >= host.size() || hex_digit(host[i + 1]) < 0 || hex_digit(host[i + 2]) < 0) return std::nullopt;
      auto const decoded = static_cast<unsigned char>(hex_digit(host[i + 1]) * 16 + hex_digit(host[i + 2]));
      if (!is_unreserved(decoded)) return std::nullopt;
      c = static_cast<char>(decoded);
      i += 2;
    }
    out += to_lower(c);
  }
  if (out.size() > 1 && out.back() == '.' && out.find(':') == std::string::npos) out.pop_back();
  if (out.empty() || out == ".") return std::nullopt;
  return out;
}

NormalPath normalize_path(std::string_view raw) {
  std::string escaped;
  escaped.reserve(raw.size() + 1);
  bool const ambiguous = append_escaped(escaped, raw, true);
  NormalPath result;
  result.path = resolve_segments(escaped);
  if (!ambiguous) return result;
  auto add = [&](std::string reading) {
    auto resolved = resolve_segments(reading);
    if (resolved != result.path &&
        std::find(result.alternates.begin(), result.alternates.end(), resolved) == result.alternates.end())
      result.alternates.push_back(std::move(resolved));
  };
  // Servers take any of these readings; each is checked on its own.
  auto const separated = with_escaped_separators(escaped);
  add(separated);
  add(without_path_params(escaped));
  add(without_path_params(separated));
  return result;
}

std::string normalize_path_pattern(std::string_view pattern) {
  if (pattern.empty()) return std::string();
  if (pattern.back() != '*') return resolve_segments(pattern);
  const auto base = pattern.substr(0, pattern.size() - 1);
  auto out = resolve_segments(base);
  if (base.ends_with('/') && out != "/") out += '/';
  out += '*';
  return out;
}

std::string normalize_query(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  append_escaped(out, raw, false);
  return out;
}

NormalTarget normalize_target(std::string_view scheme, std::string_view host, std::uint16_t port,
                              std::string_view origin_form) {
  NormalTarget t;
  t.scheme.reserve(scheme.size());
  for (char c : scheme) t.scheme += to_lower(c);
  t.host = normalize_host(host).value_or(std::string());
  bool const default_port = (t.scheme == "http" && port == 80) || (t.scheme == "https" && port == 443);
  t.port = default_port ? 0 : port;
  auto const q = origin_form.find('?');
  t.path = normalize_path(origin_form.substr(0, q));
  if (q != std::string_view::npos) t.query = normalize_query(origin_form.substr(q + 1));
  return t;
}

}  // namespace idemgate::policy
