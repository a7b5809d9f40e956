// Request targets for the proxy (see target.hpp).
#include "proxy/target.hpp"

#include "policy/normalize.hpp"

#include <boost/url/parse.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

namespace idemgate::proxy {

namespace {

void append_port(std::string& out, std::uint16_t port) {
  char digits[8];
  auto const end = std::to_chars(digits, digits + sizeof digits, port).ptr;
  out += ':';
  out.append(digits, end);
}

}  // namespace

void Target::append_authority(std::string& out) const {
  bool const v6 = host.find(':') != std::string::npos;
  bool const default_port = (scheme == "http" && port == 80) || (scheme == "https" && port == 443);
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  if (!default_port) append_port(out, port);
}

std::string Target::authority() const {
  std::string a;
  a.reserve(host.size() + 8);
  append_authority(a);
  return a;
}

std::string Target::url() const {
  std::string u;
  u.reserve(scheme.size() + 3 + host.size() + 8 + origin_form.size());
  u += scheme;
  u += "://";
  append_authority(u);
  u += origin_form;
  return u;
}

std::string Target::pool_key() const {
  std::string key;
  key.reserve(scheme.size() + host.size() + 9);
  key += scheme;
  key += "://";
  key += host;
  append_port(key, port);
  return key;
}

namespace {

std::string lowercase(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::optional<std::uint16_t> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  unsigned v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || v == 0 || v > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(v);
}

// "127.0.0.1." is a reg-name to the URL grammar, an address once normalised.
bool is_dotted_ipv4(std::string_view host) {
  return !host.empty() && std::all_of(host.begin(), host.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
  });
}

}  // namespace

namespace {

constexpr bool is_lower_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

constexpr bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// RFC 3986 pchar without pct-encoded (checked on its own), plus '/': the
// bytes a path may hold as they are.
constexpr std::array<bool, 256> kPathChar = [] {
  std::array<bool, 256> t{};
  for (char c = 'a'; c <= 'z'; ++c) t[static_cast<unsigned char>(c)] = true;
  for (char c = 'A'; c <= 'Z'; ++c) t[static_cast<unsigned char>(c)] = true;
  for (char c = '0'; c <= '9'; ++c) t[static_cast<unsigned char>(c)] = true;
  for (char c : std::string_view("-._~!$&'()*+,;=:@/")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();

// A dotted quad as RFC 3986's IPv4address spells it: four decimal octets,
// no leading zeros.
bool is_strict_ipv4(std::string_view host) {
  int parts = 0;
  std::size_t i = 0;
  while (i <= host.size()) {
    std::size_t const start = i;
    unsigned value = 0;
    while (i < host.size() && host[i] >= '0' && host[i] <= '9' && i - start < 3)
      value = value * 10 + static_cast<unsigned>(host[i++] - '0');
    std::size_t const digits = i - start;
    if (digits == 0 || value > 255 || (digits > 1 && host[start] == '0')) return false;
    ++parts;
    if (i == host.size()) break;
    if (host[i] != '.' || parts == 4) return false;
    ++i;
  }
  return parts == 4;
}

}  // namespace

namespace detail {

std::optional<Target> parse_plain_absolute_target(std::string_view text) {
  std::size_t pos;
  Target t;
  if (text.starts_with("http://")) {
    pos = 7;
    t.scheme = "http";
    t.port = 80;
  } else if (text.starts_with("https://")) {
    pos = 8;
    t.scheme = "https";
    t.port = 443;
  } else {
    return std::nullopt;
  }
  std::size_t const host_start = pos;
  while (pos < text.size() && is_lower_host_char(text[pos])) ++pos;
  std::string_view const host = text.substr(host_start, pos - host_start);
  // A name starts with a letter or digit and has no trailing dot (the
  // grammar reader drops it): the others are left to that reader.
  if (host.empty() || host.front() == '.' || host.front() == '-' || host.back() == '.') return std::nullopt;
  if (host.front() >= '0' && host.front() <= '9') {
    // Boost.URL reads a leading dotted quad as an address whatever follows
    // it ("1.2.3.4.evil"): only a whole, strict one is read here.
    if (!is_strict_ipv4(host)) return std::nullopt;
    t.host_is_ip = true;
  }
  if (pos < text.size() && text[pos] == ':') {
    std::size_t const port_start = ++pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') ++pos;
    auto const port = parse_port(text.substr(port_start, pos - port_start));
    if (!port) return std::nullopt;
    t.port = *port;
  }
  // path-abempty, then an optional query: pchar and '/' (the first '?'
  // starts the query, later ones are part of it).
  std::size_t const origin_start = pos;
  for (; pos < text.size(); ++pos) {
    char const c = text[pos];
    if (pos == origin_start && c != '/' && c != '?') return std::nullopt;
    if (kPathChar[static_cast<unsigned char>(c)] || c == '?') continue;
    if (c == '%' && pos + 2 < text.size() && is_hex(text[pos + 1]) && is_hex(text[pos + 2])) {
      pos += 2;
      continue;
    }
    return std::nullopt;
  }
  t.host = std::string(host);
  std::string_view const origin = text.substr(origin_start);
  // '/' a char: GCC 12 warns -Wstringop-overflow on a one-character literal.
  if (origin.empty() || origin.front() == '?') t.origin_form = '/';
  t.origin_form += origin;
  return t;
}

std::optional<Target> parse_absolute_target_by_grammar(std::string_view text) {
  auto parsed = boost::urls::parse_absolute_uri(text);
  if (!parsed) return std::nullopt;
  auto const& u = *parsed;
  Target t;
  t.scheme = lowercase(u.scheme());
  if (t.scheme != "http" && t.scheme != "https") return std::nullopt;
  if (!u.has_authority() || u.has_userinfo()) return std::nullopt;
  auto const host_type = u.host_type();
  if (host_type == boost::urls::host_type::ipv6) {
    t.host = lowercase(u.encoded_host_address());
    t.host_is_ip = true;
  } else if (host_type == boost::urls::host_type::ipv4) {
    t.host = std::string(u.encoded_host());
    t.host_is_ip = true;
  } else if (host_type == boost::urls::host_type::name) {
    // One normal form for every use of the host (matching, egress, DNS,
    // SNI): "API.Stripe.com." and "api.%73tripe.com" are api.stripe.com.
    auto host = policy::normalize_host(u.encoded_host());
    if (!host) return std::nullopt;
    t.host = std::move(*host);
    t.host_is_ip = is_dotted_ipv4(t.host);
  } else {
    return std::nullopt;
  }
  if (t.host.empty()) return std::nullopt;
  if (u.has_port()) {
    auto p = parse_port(u.port());
    if (!p) return std::nullopt;
    t.port = *p;
  } else {
    t.port = t.scheme == "https" ? 443 : 80;
  }
  std::string_view path = u.encoded_path();
  // Boost.URL 1.81 reads "http://127.0.0.1.:80/x" (and "http://1.2.3.4.evil/")
  // as an IPv4 host followed by a path that does not start with '/'.
  if (!path.empty() && path.front() != '/') return std::nullopt;
  t.origin_form = path.empty() ? "/" : std::string(path);
  if (u.has_query()) {
    t.origin_form += '?';
    t.origin_form += u.encoded_query();
  }
  return t;
}


}  // namespace detail

std::optional<Target> parse_absolute_target(std::string_view text) {
  if (auto plain = detail::parse_plain_absolute_target(text)) return plain;
  return detail::parse_absolute_target_by_grammar(text);
}

std::optional<Target> parse_authority_target(std::string_view text) {
  Target t;
  t.scheme = "https";
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return std::nullopt;
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    t.host_is_ip = true;
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return std::nullopt;
  }
  if (host.empty()) return std::nullopt;
  for (char c : host) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
              (t.host_is_ip && c == ':');
    if (!ok) return std::nullopt;
  }
  auto p = parse_port(port);
  if (!p) return std::nullopt;
  t.port = *p;
  auto normal = policy::normalize_host(host);
  if (!normal) return std::nullopt;
  t.host = std::move(*normal);
  if (!t.host_is_ip) t.host_is_ip = is_dotted_ipv4(t.host);
  t.origin_form = '/';  // a char, as above
  return t;
}

std::optional<Target> route_target(std::string_view prefix, std::string_view upstream, std::string_view origin) {
  std::string_view const path = origin.substr(0, origin.find('?'));
  if (prefix.empty() || !path.starts_with(prefix)) return std::nullopt;
  auto base = parse_absolute_target(upstream);
  if (!base) return std::nullopt;
  std::string base_path = base->origin_form.substr(0, base->origin_form.find('?'));
  while (!base_path.empty() && base_path.back() == '/') base_path.pop_back();
  std::string_view rest = origin.substr(prefix.size());
  while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);  // "/p" + "/x" is not "//x"
  base->origin_form = base_path + "/" + std::string(rest);
  return base;
}

}  // namespace idemgate::proxy
