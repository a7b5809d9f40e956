// HTTP/1.1 framing and header rules for the proxy (see http_rules.hpp).
#include "proxy/http_rules.hpp"

#include "proxy/answer_head.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/detail/rfc7230.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <type_traits>

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

// The names a Connection or Proxy-Connection value lists, added to `names`
// (views into `list`). Each element's leading token is a name, whatever
// follows it in the element ("x-a x-b", "x-a;q=1" name x-a): never fewer
// names than a strict reading of the list, which stops at the first bad
// element.
using ConnectionNames = boost::container::small_vector<std::string_view, 4>;
void add_connection_names(ConnectionNames& names, std::string_view list) {
  for (;;) {
    auto const comma = list.find(',');
    auto element = list.substr(0, comma);
    while (!element.empty() && (element.front() == ' ' || element.front() == '\t')) element.remove_prefix(1);
    std::size_t length = 0;
    while (length < element.size() && http::detail::is_token_char(element[length])) ++length;
    if (length != 0) names.push_back(element.substr(0, length));
    if (comma == std::string_view::npos) return;
    list.remove_prefix(comma + 1);
  }
}

bool names_connection(http::field name) {
  return name == http::field::connection || name == http::field::proxy_connection;
}

// Whether a hop drops the field: hop-by-hop, named by the message's
// Connection, or (strip_idemgate) an Idemgate-* field.
bool hop_drops(http::field name, std::string_view name_string, const ConnectionNames& names, bool strip_idemgate) {
  auto const is_named = [&] {
    return std::any_of(names.begin(), names.end(),
                       [&](std::string_view n) { return boost::beast::iequals(n, name_string); });
  };
  return is_hop_by_hop(name) ||
         (strip_idemgate && name_string.size() >= 9 && boost::beast::iequals(name_string.substr(0, 9), "idemgate-")) ||
         (!names.empty() && is_named());
}

// Beast's fields and an AnswerHead alike: the same accessors, the same rule.
template <class Fields>
void strip_fields(Fields& f, bool strip_idemgate) {
  // Two passes over the fields, no lookup by name: this runs on every
  // message. Beast frees a field's bytes when it is erased, and the
  // Connection field is erased before the fields after it are checked, so
  // its names are copied first (usually into the string's own small
  // buffer); an AnswerHead's values are views of bytes that outlive the
  // erase, and are split in place.
  constexpr bool values_outlive_erase = std::is_same_v<Fields, AnswerHead>;
  ConnectionNames names;
  std::string named;
  for (auto const& field : f) {
    if (!names_connection(field.name())) continue;
    if constexpr (values_outlive_erase) {
      add_connection_names(names, field.value());
    } else {
      named += field.value();
      named += ',';
    }
  }
  if (!named.empty()) add_connection_names(names, named);
  for (auto it = f.begin(); it != f.end();)
    it = hop_drops(it->name(), it->name_string(), names, strip_idemgate) ? f.erase(it) : std::next(it);
}

}  // namespace

EndToEndFields end_to_end_fields(const http::fields& f, bool strip_idemgate) {
  ConnectionNames names;
  for (auto const& field : f)
    if (names_connection(field.name())) add_connection_names(names, field.value());
  EndToEndFields kept;
  for (auto const& field : f)
    if (!hop_drops(field.name(), field.name_string(), names, strip_idemgate)) kept.push_back(&field);
  return kept;
}

void strip_hop_by_hop(http::fields& f, bool strip_idemgate) { strip_fields(f, strip_idemgate); }

void strip_hop_by_hop(AnswerHead& h, bool strip_idemgate) { strip_fields(h, strip_idemgate); }

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

std::string_view via_hop(unsigned version, char (&hop)[13]) noexcept {
  std::memcpy(hop, "1.1 idemgate", sizeof hop);
  hop[0] = static_cast<char>('0' + version / 10 % 10);
  hop[2] = static_cast<char>('0' + version % 10);
  return std::string_view(hop, sizeof hop - 1);
}

namespace {

template <class Field>
const Field& field_of(const Field& f) { return f; }
template <class Field>
const Field& field_of(const Field* f) { return *f; }

// Every non-empty Via value of `fields` (fields or pointers to them), in
// order, each followed by ", ", then this hop: one Via for all the hops
// (RFC 9110 7.6.3).
template <class Fields>
std::string via_of(const Fields& fields, unsigned version) {
  std::string joined;
  for (auto const& each : fields)
    if (auto const& field = field_of(each); field.name() == http::field::via && !field.value().empty()) {
      joined += field.value();
      joined += ", ";
    }
  char hop[13];
  joined += via_hop(version, hop);
  return joined;
}

}  // namespace

std::string joined_via(const EndToEndFields& fields, unsigned version) { return via_of(fields, version); }

void add_via(http::fields& f, unsigned version) {
  auto joined = via_of(f, version);
  f.set(http::field::via, joined);
}

void add_via(AnswerHead& h, unsigned version) {
  // As for Beast's fields above.
  auto joined = via_of(h, version);
  h.erase_all(http::field::via);
  h.append_copy(http::field::via, std::move(joined));
}

void prepare_answer_head(AnswerHead& h, unsigned client_version, bool chunked, bool keep_alive,
                         bool strip_idemgate) {
  strip_hop_by_hop(h, strip_idemgate);
  add_via(h, h.version);
  h.version = client_version;
  if (chunked) {
    h.erase_all(http::field::content_length);
    h.append(http::field::transfer_encoding, "chunked");
  }
  // Connection is stripped: only what differs from the version's default.
  if (keep_alive && client_version < 11) h.append(http::field::connection, "keep-alive");
  if (!keep_alive && client_version >= 11) h.append(http::field::connection, "close");
}

namespace {

// A header rendered into a string sized once: the fields are walked twice
// (sizes, then bytes) instead of growing the string by four appends a
// field; this runs twice a request.
template <class Fields>
class HeadWriter {
public:
  HeadWriter(const Fields& f, std::size_t start_line, std::string& out) : fields_(f) {
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
  const Fields& fields_;
  char* p_ = nullptr;
};

constexpr std::size_t kVersionSize = 8;  // "HTTP/1.1"

}  // namespace

void render_head(const http::request_header<>& h, std::string& out) {
  std::string_view const method = h.method_string();
  std::string_view const target = h.target();
  HeadWriter<http::fields> w(h, method.size() + 1 + target.size() + 1 + kVersionSize + 2, out);
  w.put(method);
  w.put(' ');
  w.put(target);
  w.put(' ');
  w.put_version(h.version());
  w.put("\r\n");
  w.put_fields();
}

namespace {

template <class Fields>
void render_answer(const Fields& f, unsigned version, unsigned code, std::string_view reason, std::string& out) {
  HeadWriter<Fields> w(f, kVersionSize + 5 + reason.size() + 2, out);
  w.put_version(version);
  w.put(' ');
  w.put(static_cast<char>('0' + code / 100 % 10));
  w.put(static_cast<char>('0' + code / 10 % 10));
  w.put(static_cast<char>('0' + code % 10));
  w.put(' ');
  w.put(reason);
  w.put("\r\n");
  w.put_fields();
}

}  // namespace

void render_head(const http::response_header<>& h, std::string& out) {
  render_answer<http::fields>(h, h.version(), h.result_int(), h.reason(), out);
}

void render_head(const AnswerHead& h, std::string& out) {
  // An empty reason is written as Beast writes it: the status's own text.
  std::string_view const reason =
      h.reason.empty() ? std::string_view(http::obsolete_reason(static_cast<http::status>(h.status))) : h.reason;
  render_answer(h, h.version, h.status, reason, out);
}

}  // namespace idemgate::proxy
