// A flat upstream answer header and the parser that fills it (see
// answer_head.hpp).
#include "proxy/answer_head.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>

namespace idemgate::proxy {

namespace http = boost::beast::http;

AnswerHead::const_iterator AnswerHead::find(http::field name) const noexcept {
  return std::find_if(fields_.begin(), fields_.end(), [name](const HeadField& f) { return f.name() == name; });
}

void AnswerHead::erase_all(http::field name) {
  fields_.erase(std::remove_if(fields_.begin(), fields_.end(), [name](const HeadField& f) { return f.name() == name; }),
                fields_.end());
}

void AnswerHead::append(http::field name, std::string_view value) {
  fields_.emplace_back(name, http::to_string(name), value);
}

void AnswerHead::append_copy(http::field name, std::string value) {
  copied_ = std::move(value);
  fields_.emplace_back(name, http::to_string(name), copied_);
}

void AnswerHead::set_content_length(std::uint64_t length) {
  erase_all(http::field::content_length);
  auto const end = std::to_chars(length_, length_ + sizeof length_, length).ptr;
  append(http::field::content_length, std::string_view(length_, static_cast<std::size_t>(end - length_)));
}

void AnswerHead::set(std::string_view name, std::string_view value) {
  fields_.erase(std::remove_if(fields_.begin(), fields_.end(),
                               [name](const HeadField& f) { return boost::beast::iequals(f.name_string(), name); }),
                fields_.end());
  fields_.emplace_back(http::string_to_field(name), name, value);
}

std::string_view AnswerHead::keep_folded(std::string_view value, std::size_t bound) {
  if (folded_.empty()) folded_.reserve(bound);
  auto const at = folded_.size();
  folded_.append(value);
  return std::string_view(folded_).substr(at);
}

void AnswerHead::clear() noexcept {
  status = 0;
  version = 11;
  reason = {};
  fields_.clear();
  folded_.clear();
  copied_.clear();
}

void AnswerHead::copy_to(http::fields& out) const {
  out.clear();
  for (auto const& f : fields_) out.insert(f.name(), f.name_string(), f.value());
}

namespace {

// RFC 9110's tchar: what a field name is made of (Beast's is_token table).
constexpr auto kTokenChars = [] {
  std::array<bool, 256> t{};
  for (unsigned char c : std::string_view("!#$%&'*+-.^_`|~")) t[c] = true;
  for (int c = '0'; c <= '9'; ++c) t[static_cast<unsigned char>(c)] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[static_cast<unsigned char>(c)] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[static_cast<unsigned char>(c)] = true;
  return t;
}();

// What a reason or a field value may hold here: visible ASCII, SP and HTAB
// (Beast also takes bytes above 0x7f, left to it).
constexpr bool plain_char(char c) noexcept {
  auto const u = static_cast<unsigned char>(c);
  return (u >= 0x20 && u < 0x7f) || u == '\t';
}

// The first byte in [p, end) that is not plain_char, or end: sixteen bytes
// at a time where SSE2 is there (every x86-64), the rest one by one.
char const* skip_plain(char const* p, char const* end) noexcept {
#if defined(__SSE2__)
  __m128i const space = _mm_set1_epi8(0x20);
  __m128i const tab = _mm_set1_epi8('\t');
  __m128i const del = _mm_set1_epi8(0x7f);
  while (end - p >= 16) {
    __m128i const x = _mm_loadu_si128(reinterpret_cast<__m128i const*>(p));
    // Signed: bytes above 0x7f are negative, so "below SP" takes them too.
    __m128i const bad =
        _mm_or_si128(_mm_andnot_si128(_mm_cmpeq_epi8(x, tab), _mm_cmplt_epi8(x, space)), _mm_cmpeq_epi8(x, del));
    if (int const mask = _mm_movemask_epi8(bad); mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
    p += 16;
  }
#endif
  while (p != end && plain_char(*p)) ++p;
  return p;
}

constexpr bool digit(char c) noexcept { return c >= '0' && c <= '9'; }

}  // namespace

bool read_plain_answer_head(std::string_view bytes, std::size_t header_limit, AnswerHead& head,
                            AnswerFraming& framing) {
  auto const fail = [&head] {
    head.clear();
    return false;
  };
  head.clear();
  char const* p = bytes.data();
  char const* const end = p + bytes.size();
  // "HTTP/1.x NNN " then the reason to CRLF. The shortest whole header,
  // "HTTP/1.1 204 \r\n\r\n", is 17 bytes.
  if (bytes.size() < 17 || std::memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') || p[8] != ' ' ||
      p[9] < '2' || p[9] > '5' || !digit(p[10]) || !digit(p[11]) || p[12] != ' ')
    return fail();
  head.version = p[7] == '1' ? 11 : 10;
  head.status = static_cast<unsigned>((p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0'));
  p += 13;
  // Each line is plain text up to its CRLF (a CR alone, a control byte or
  // one above 0x7f: Beast's), and a field line is not followed by a folded one.
  auto const line_end = [end](char const* from) -> char const* {
    char const* const cr = skip_plain(from, end);
    return end - cr >= 2 && cr[0] == '\r' && cr[1] == '\n' ? cr : nullptr;
  };
  char const* cr = line_end(p);
  if (cr == nullptr) return fail();
  head.reason = std::string_view(p, static_cast<std::size_t>(cr - p));
  p = cr + 2;

  bool close = false, keep_alive = false;
  boost::optional<std::uint64_t> length;
  for (;;) {
    if (end - p < 2) return fail();
    if (p[0] == '\r') {
      if (p[1] != '\n') return fail();
      p += 2;
      break;
    }
    char const* const name = p;
    while (p != end && kTokenChars[static_cast<unsigned char>(*p)]) ++p;
    if (p == name || p == end || *p != ':') return fail();
    std::string_view const name_string(name, static_cast<std::size_t>(p - name));
    char const* value = p + 1;
    cr = line_end(value);
    if (cr == nullptr || end - cr < 3 || cr[2] == ' ' || cr[2] == '\t') return fail();
    while (value != cr && (*value == ' ' || *value == '\t')) ++value;
    char const* value_end = cr;
    while (value_end != value && (value_end[-1] == ' ' || value_end[-1] == '\t')) --value_end;
    p = cr + 2;
    std::string_view const v(value, static_cast<std::size_t>(value_end - value));
    auto const f = http::string_to_field(name_string);
    switch (f) {
      case http::field::content_length: {
        // Digits alone, once, short of any overflow: a list or a repeat is Beast's.
        if (length || v.empty() || v.size() > 18) return fail();
        std::uint64_t n = 0;
        for (char c : v) {
          if (!digit(c)) return fail();
          n = n * 10 + static_cast<std::uint64_t>(c - '0');
        }
        length = n;
        break;
      }
      case http::field::connection:
        if (boost::beast::iequals(v, "close"))
          close = true;
        else if (boost::beast::iequals(v, "keep-alive"))
          keep_alive = true;
        else
          return fail();
        break;
      case http::field::transfer_encoding:
      case http::field::upgrade:
      case http::field::proxy_connection:
        return fail();
      default:
        break;
    }
    head.append_field(f, name_string, v);
  }
  auto const size = static_cast<std::size_t>(p - bytes.data());
  bool const no_body = head.status == 204 || head.status == 304;
  // A body delimited by the connection's end is Beast's.
  if (size >= header_limit || (!no_body && !length)) return fail();
  framing.header_size = size;
  framing.chunked = false;
  framing.done = no_body || *length == 0;
  framing.need_eof = false;
  framing.keep_alive = head.version == 11 ? !close : keep_alive;
  framing.content_length = length;
  return true;
}

AnswerFraming AnswerParser::framing(std::size_t header_size) const {
  AnswerFraming f;
  f.header_size = header_size;
  f.chunked = chunked();
  f.done = is_done();
  f.keep_alive = keep_alive();
  f.need_eof = need_eof();
  f.content_length = content_length();
  return f;
}

// Beast hands over views into the bytes given to put(), except a value with
// obs-fold, which it rewrites into a buffer of its own that lives only for
// the call: that one is copied.
std::string_view AnswerParser::kept(string_view s) {
  std::string_view const view(s.data(), s.size());
  auto const* const begin = input_.data();
  auto const* const end = begin + input_.size();
  if (view.data() >= begin && view.data() + view.size() <= end) return view;
  return head_.keep_folded(view, input_.size());
}

void AnswerParser::on_response_impl(int code, string_view reason, int version, error_code&) {
  head_.status = static_cast<unsigned>(code);
  head_.version = static_cast<unsigned>(version);
  head_.reason = kept(reason);
}

void AnswerParser::on_field_impl(http::field name, string_view name_string, string_view value, error_code&) {
  head_.append_field(name, kept(name_string), kept(value));
}

void AnswerParser::on_body_init_impl(boost::optional<std::uint64_t> const&, error_code& ec) {
  ec = http::error::unexpected_body;
}

std::size_t AnswerParser::on_body_impl(string_view, error_code& ec) {
  ec = http::error::unexpected_body;
  return 0;
}

void AnswerParser::on_chunk_header_impl(std::uint64_t, string_view, error_code& ec) {
  ec = http::error::unexpected_body;
}

std::size_t AnswerParser::on_chunk_body_impl(std::uint64_t, string_view, error_code& ec) {
  ec = http::error::unexpected_body;
  return 0;
}

}  // namespace idemgate::proxy
