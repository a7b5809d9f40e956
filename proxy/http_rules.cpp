// HTTP/1.1 framing and header rules for the proxy (see http_rules.hpp).
#include "proxy/http_rules.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/detail/rfc7230.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <charconv>
#include <cstring>

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
    while (length < element.size() && http::detail::is_token_char(element[length])) ++length;
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
