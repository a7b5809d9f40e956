// HTTP/1.1 framing and header rules for the proxy (see http_rules.hpp).
#include "proxy/http_rules.hpp"

#include "policy/normalize.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/container/small_vector.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/range/iterator_range.hpp>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <vector>

namespace idemgate::proxy {

namespace http = boost::beast::http;

RawHeaderCheck check_raw_header(std::string_view bytes, std::size_t request_line_limit) noexcept {
  RawHeaderCheck out;
  std::size_t pos = 0;
  // Skip empty lines before the request line.
  while (pos + 1 < bytes.size() && bytes[pos] == '\r' && bytes[pos + 1] == '\n') pos += 2;
  auto const line_end = bytes.find("\r\n", pos);
  std::size_t const line_len = (line_end == std::string_view::npos ? bytes.size() : line_end) - pos;
  if (line_len > request_line_limit) {
    out.error = RawHeaderError::request_line_too_long;
    return out;
  }
  auto const end = bytes.find("\r\n\r\n", pos);
  std::string_view const scan = end == std::string_view::npos ? bytes : bytes.substr(0, end + 4);
  // The first NUL, and each LF before it (memchr: this runs on every
  // request); an error is the first offending byte's.
  auto const nul = scan.find('\0', pos);
  std::string_view const lines = scan.substr(0, nul);
  for (auto i = lines.find('\n', pos); i != std::string_view::npos; i = lines.find('\n', i + 1)) {
    if (i == 0 || scan[i - 1] != '\r') {
      out.error = RawHeaderError::bare_lf;
      return out;
    }
    if (i + 1 < scan.size() && (scan[i + 1] == ' ' || scan[i + 1] == '\t')) {
      out.error = RawHeaderError::obs_fold;
      return out;
    }
  }
  if (nul != std::string_view::npos) {
    out.error = RawHeaderError::nul_byte;
    return out;
  }
  if (end == std::string_view::npos) return out;  // incomplete
  out.error = RawHeaderError::none;
  out.header_size = end + 4;
  return out;
}

namespace {

void append_port(std::string& out, std::uint16_t port) {
  char digits[8];
  auto const end = std::to_chars(digits, digits + sizeof digits, port).ptr;
  out += ':';
  out.append(digits, end);
}

}  // namespace

std::string Target::authority() const {
  bool const v6 = host.find(':') != std::string::npos;
  bool const default_port = (scheme == "http" && port == 80) || (scheme == "https" && port == 443);
  std::string a;
  a.reserve(host.size() + 8);
  if (v6) a += '[';
  a += host;
  if (v6) a += ']';
  if (!default_port) append_port(a, port);
  return a;
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

// Letters, digits and the given bytes.
constexpr std::array<bool, 256> alnum_and(std::string_view extra) {
  std::array<bool, 256> t{};
  for (char c = 'a'; c <= 'z'; ++c) t[static_cast<unsigned char>(c)] = true;
  for (char c = 'A'; c <= 'Z'; ++c) t[static_cast<unsigned char>(c)] = true;
  for (char c = '0'; c <= '9'; ++c) t[static_cast<unsigned char>(c)] = true;
  for (char c : extra) t[static_cast<unsigned char>(c)] = true;
  return t;
}

// RFC 3986 pchar without pct-encoded (checked on its own), plus '/': the
// bytes a path may hold as they are.
constexpr std::array<bool, 256> kPathChar = alnum_and("-._~!$&'()*+,;=:@/");

// RFC 9110 tchar: the bytes a field name (a token) is made of.
constexpr std::array<bool, 256> kTokenChar = alnum_and("!#$%&'*+-.^_`|~");

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
  if (origin.empty() || origin.front() == '?') t.origin_form = "/";
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
  t.origin_form = "/";
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

bool acceptable_request_transfer_encoding(const http::fields& f) {
  auto const count = f.count(http::field::transfer_encoding);
  if (count == 0) return true;
  if (count > 1) return false;
  auto const value = f[http::field::transfer_encoding];
  http::token_list tokens{value};
  auto it = tokens.begin();
  if (it == tokens.end() || !boost::beast::iequals(*it, "chunked")) return false;
  return ++it == tokens.end();
}

namespace {

bool is_hop_by_hop(http::field name) {
  switch (name) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_authorization:
    case http::field::proxy_connection:
    case http::field::te:
    case http::field::trailer:
    case http::field::upgrade:
    case http::field::transfer_encoding:
      return true;
    default:
      return false;
  }
}

}  // namespace

void strip_hop_by_hop(http::fields& f, bool strip_idemgate) {
  // Headers named by Connection are hop-by-hop too. Two passes over the
  // fields, no lookup by name: this runs on every message. The names are
  // copied (usually into the string's own small buffer) and split once: the
  // Connection field they come from is erased before the fields after it
  // are checked.
  std::string named;
  for (auto const& field : f) {
    if (field.name() != http::field::connection && field.name() != http::field::proxy_connection) continue;
    named += field.value();
    named += ',';
  }
  // Each element's leading token is a name, whatever follows it in the
  // element ("x-a x-b", "x-a;q=1" name x-a): never fewer names than a
  // strict reading of the list, which stops at the first bad element.
  boost::container::small_vector<std::string_view, 4> names;
  for (std::string_view rest = named; !rest.empty();) {
    auto const comma = rest.find(',');
    auto element = rest.substr(0, comma);
    rest.remove_prefix(comma + 1);  // every element ends with a comma
    while (!element.empty() && (element.front() == ' ' || element.front() == '\t')) element.remove_prefix(1);
    std::size_t length = 0;
    while (length < element.size() && kTokenChar[static_cast<unsigned char>(element[length])]) ++length;
    if (length != 0) names.push_back(element.substr(0, length));
  }
  auto const is_named = [&](std::string_view name) {
    return std::any_of(names.begin(), names.end(), [&](std::string_view n) { return boost::beast::iequals(n, name); });
  };
  for (auto it = f.begin(); it != f.end();) {
    auto const name = it->name_string();
    bool const drop = is_hop_by_hop(it->name()) ||
                      (strip_idemgate && name.size() >= 9 && boost::beast::iequals(name.substr(0, 9), "idemgate-")) ||
                      (!names.empty() && is_named(name));
    it = drop ? f.erase(it) : std::next(it);
  }
}

std::optional<std::chrono::seconds> keep_alive_timeout(std::string_view value) {
  auto const trim = [](std::string_view t) {
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    return t;
  };
  while (!value.empty()) {
    auto const comma = value.find(',');
    auto const param = trim(value.substr(0, comma));
    value = comma == std::string_view::npos ? std::string_view{} : value.substr(comma + 1);
    auto const equals = param.find('=');
    if (equals == std::string_view::npos || !boost::beast::iequals(trim(param.substr(0, equals)), "timeout")) continue;
    auto number = trim(param.substr(equals + 1));
    if (number.size() >= 2 && number.front() == '"' && number.back() == '"') number = number.substr(1, number.size() - 2);
    unsigned seconds = 0;
    auto const [end, ec] = std::from_chars(number.data(), number.data() + number.size(), seconds);
    if (ec != std::errc{} || end != number.data() + number.size() || number.size() > 7 || seconds == 0) return std::nullopt;
    return std::chrono::seconds(seconds);
  }
  return std::nullopt;
}

void add_via(http::fields& f, unsigned version) {
  char hop[] = "1.1 idemgate";
  hop[0] = static_cast<char>('0' + version / 10 % 10);
  hop[2] = static_cast<char>('0' + version % 10);
  std::string_view const mine(hop, sizeof hop - 1);
  auto const existing = f.find(http::field::via);
  if (existing == f.end() || existing->value().empty()) {
    if (existing != f.end()) f.erase(existing);
    f.insert(http::field::via, mine);
    return;
  }
  std::string joined(existing->value());
  joined += ", ";
  joined += mine;
  f.set(http::field::via, joined);
}

namespace {

// A header rendered into a string sized once: the fields are walked twice
// (sizes, then bytes) instead of growing the string by four appends a
// field; this runs twice a request.
class HeadWriter {
public:
  HeadWriter(const http::fields& f, std::size_t start_line, std::string& out) : fields_(f) {
    std::size_t size = start_line + 2;
    for (auto const& field : f) size += field.name_string().size() + field.value().size() + 4;
    out.resize(size);
    p_ = out.data();
  }

  void put(std::string_view s) noexcept {
    std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }
  void put(char c) noexcept { *p_++ = c; }
  void put_version(unsigned version) noexcept {
    put("HTTP/");
    put(static_cast<char>('0' + version / 10 % 10));
    put('.');
    put(static_cast<char>('0' + version % 10));
  }
  void put_fields() noexcept {
    for (auto const& field : fields_) {
      put(field.name_string());
      put(": ");
      put(field.value());
      put("\r\n");
    }
    put("\r\n");
  }

private:
  const http::fields& fields_;
  char* p_ = nullptr;
};

constexpr std::size_t kVersionSize = 8;  // "HTTP/1.1"

}  // namespace

void render_head(const http::request_header<>& h, std::string& out) {
  std::string_view const method = h.method_string();
  std::string_view const target = h.target();
  HeadWriter w(h, method.size() + 1 + target.size() + 1 + kVersionSize + 2, out);
  w.put(method);
  w.put(' ');
  w.put(target);
  w.put(' ');
  w.put_version(h.version());
  w.put("\r\n");
  w.put_fields();
}

void render_head(const http::response_header<>& h, std::string& out) {
  std::string_view const reason = h.reason();
  HeadWriter w(h, kVersionSize + 5 + reason.size() + 2, out);
  unsigned const code = h.result_int();
  w.put_version(h.version());
  w.put(' ');
  w.put(static_cast<char>('0' + code / 100 % 10));
  w.put(static_cast<char>('0' + code / 10 % 10));
  w.put(static_cast<char>('0' + code % 10));
  w.put(' ');
  w.put(reason);
  w.put("\r\n");
  w.put_fields();
}

}  // namespace idemgate::proxy
