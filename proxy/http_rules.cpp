// HTTP/1.1 framing and header rules for the proxy (see http_rules.hpp).
#include "proxy/http_rules.hpp"

#include "policy/normalize.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/range/iterator_range.hpp>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <array>
#include <charconv>
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
  for (std::size_t i = pos; i < scan.size(); ++i) {
    char const c = scan[i];
    if (c == '\0') {
      out.error = RawHeaderError::nul_byte;
      return out;
    }
    if (c == '\n') {
      if (i == 0 || scan[i - 1] != '\r') {
        out.error = RawHeaderError::bare_lf;
        return out;
      }
      if (i + 1 < scan.size() && (scan[i + 1] == ' ' || scan[i + 1] == '\t')) {
        out.error = RawHeaderError::obs_fold;
        return out;
      }
    }
  }
  if (end == std::string_view::npos) return out;  // incomplete
  out.error = RawHeaderError::none;
  out.header_size = end + 4;
  return out;
}

std::string Target::authority() const {
  bool const v6 = host.find(':') != std::string::npos;
  std::string a = v6 ? "[" + host + "]" : host;
  bool const default_port = (scheme == "http" && port == 80) || (scheme == "https" && port == 443);
  if (!default_port) a += ":" + std::to_string(port);
  return a;
}

std::string Target::pool_key() const {
  return scheme + "://" + host + ":" + std::to_string(port);
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

std::optional<Target> parse_absolute_target(std::string_view text) {
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
  // Headers named by Connection are hop-by-hop too. One pass over the
  // fields, not a lookup per name: this runs on every message.
  std::vector<std::string> named;
  for (auto const name : {http::field::connection, http::field::proxy_connection}) {
    for (auto const& field : boost::make_iterator_range(f.equal_range(name)))
      for (auto token : http::token_list{field.value()}) named.emplace_back(token);
  }
  auto const is_named = [&](std::string_view name) {
    return std::any_of(named.begin(), named.end(), [&](const std::string& n) { return boost::beast::iequals(n, name); });
  };
  for (auto it = f.begin(); it != f.end();) {
    auto const name = it->name_string();
    bool const drop = is_hop_by_hop(it->name()) ||
                      (strip_idemgate && name.size() >= 9 && boost::beast::iequals(name.substr(0, 9), "idemgate-")) ||
                      (!named.empty() && is_named(name));
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
  std::string hop = std::to_string(version / 10) + "." + std::to_string(version % 10) + " idemgate";
  auto existing = f[http::field::via];
  if (existing.empty()) {
    f.set(http::field::via, hop);
  } else {
    std::string joined(existing);
    joined += ", ";
    joined += hop;
    f.set(http::field::via, joined);
  }
}

namespace {

void append_fields(const http::fields& f, std::string& out) {
  for (auto const& field : f) {
    out += field.name_string();
    out += ": ";
    out += field.value();
    out += "\r\n";
  }
  out += "\r\n";
}

void append_version(unsigned version, std::string& out) {
  out += "HTTP/";
  out += static_cast<char>('0' + version / 10);
  out += '.';
  out += static_cast<char>('0' + version % 10);
}

}  // namespace

void render_head(const http::request_header<>& h, std::string& out) {
  out.clear();
  out += h.method_string();
  out += ' ';
  out += h.target();
  out += ' ';
  append_version(h.version(), out);
  out += "\r\n";
  append_fields(h, out);
}

void render_head(const http::response_header<>& h, std::string& out) {
  out.clear();
  append_version(h.version(), out);
  unsigned const code = h.result_int();
  out += ' ';
  out += static_cast<char>('0' + code / 100 % 10);
  out += static_cast<char>('0' + code / 10 % 10);
  out += static_cast<char>('0' + code % 10);
  out += ' ';
  out += h.reason();
  out += "\r\n";
  append_fields(h, out);
}

}  // namespace idemgate::proxy
