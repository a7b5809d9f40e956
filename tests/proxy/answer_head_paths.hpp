// Two ways to turn an upstream answer's header into the one the client
// sees: Beast's parser and fields step by step (how the pass-through path
// did it, and how the relay path still streams), and the flat AnswerHead.
// Shared by the unit test and the answer_head fuzz target, which both
// require the two to agree byte for byte, but for one freedom: Beast's
// fields place a repeated field after the last one of its name, the flat
// head keeps the upstream's order (both keep the order of the fields of one
// name, the only order HTTP gives meaning to), so heads are compared with
// their field lines stably sorted by name.
#pragma once

#include "proxy/answer_head.hpp"
#include "proxy/http_rules.hpp"

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace idemgate::test {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using proxy::AnswerHead;
using proxy::AnswerParser;

// The header limit of both paths: Beast's parser's default, which
// read_framing keeps.
inline constexpr std::size_t kHeaderLimit = 8192;

struct Framing {
  unsigned client_version = 11;
  bool client_wants_keep_alive = true;
  bool head_request = false;
};

struct Rendered {
  bool ok = false;
  bool plain = false;  // read by read_plain_answer_head, not by Beast's parser
  std::string head;
  std::size_t header_size = 0;
  bool chunked = false, done = false, keep_alive = false, need_eof = false;
  boost::optional<std::uint64_t> content_length;
};

// The decision forward.cpp makes from the parser's framing.
inline bool rechunk_and_keep_alive(bool chunked, bool done, bool has_length, const Framing& f, bool& keep_alive) {
  keep_alive = f.client_wants_keep_alive;
  bool const eof_delimited = !done && !chunked && !has_length;
  if (!(chunked || eof_delimited)) return false;
  if (f.client_version == 11) return true;
  keep_alive = false;
  return false;
}

// The header of bytes put into p (the body limit lifted, HEAD skipped), and
// the framing both paths decide from.
inline bool read_framing(http::basic_parser<false>& p, std::string_view bytes, const Framing& f, Rendered& out,
                         bool& keep_alive, bool& rechunk) {
  p.body_limit(boost::none);
  if (f.head_request) p.skip(true);
  boost::beast::error_code ec;
  out.header_size = p.put(asio::buffer(bytes.data(), bytes.size()), ec);
  if (ec || !p.is_header_done()) return false;
  out.ok = true;
  out.chunked = p.chunked();
  out.done = p.is_done();
  out.keep_alive = p.keep_alive();
  out.need_eof = p.need_eof();
  out.content_length = p.content_length();
  rechunk = rechunk_and_keep_alive(out.chunked, out.done, bool(out.content_length), f, keep_alive);
  return true;
}

// The way the pass-through path did it before the flat head: Beast's parser
// and fields, each step on the message.
inline Rendered through_beast(std::string_view bytes, const Framing& f) {
  Rendered out;
  http::response_parser<http::string_body> p;
  bool keep_alive = false, rechunk = false;
  if (!read_framing(p, bytes, f, out, keep_alive, rechunk)) return out;
  auto& res = p.get();
  proxy::strip_hop_by_hop(res, false);
  proxy::add_via(res, res.version());
  res.version(f.client_version);
  if (rechunk) res.chunked(true);
  if (!keep_alive || f.client_version != 11) res.keep_alive(keep_alive);
  proxy::render_head(res, out.head);
  return out;
}

// As forward.cpp reads a header that came whole: the parser made first, a
// plain header read without it, any other put into it.
inline Rendered through_flat(std::string_view bytes, const Framing& f, AnswerHead& head) {
  Rendered out;
  AnswerParser p(head);
  bool keep_alive = false, rechunk = false;
  proxy::AnswerFraming plain;
  if (!f.head_request && proxy::read_plain_answer_head(bytes, kHeaderLimit, head, plain)) {
    out.ok = out.plain = true;
    out.header_size = plain.header_size;
    out.chunked = plain.chunked;
    out.done = plain.done;
    out.keep_alive = plain.keep_alive;
    out.need_eof = plain.need_eof;
    out.content_length = plain.content_length;
    rechunk = rechunk_and_keep_alive(out.chunked, out.done, bool(out.content_length), f, keep_alive);
  } else {
    p.input(bytes);
    if (!read_framing(p, bytes, f, out, keep_alive, rechunk)) return out;
  }
  proxy::prepare_answer_head(head, f.client_version, rechunk, keep_alive);
  proxy::render_head(head, out.head);
  return out;
}

// The relay path: the flat head copied into Beast's fields and rendered from them.
inline std::string through_copy(const AnswerHead& head, std::string_view bytes, const Framing& f) {
  http::response_parser<http::string_body> p;
  p.body_limit(boost::none);
  if (f.head_request) p.skip(true);
  boost::beast::error_code ec;
  p.put(asio::buffer(bytes.data(), bytes.size()), ec);
  auto& res = p.get();
  head.copy_to(res.base());
  res.version(f.client_version);
  std::string out;
  proxy::render_head(res, out);
  return out;
}

// The status line, then the field lines stably sorted by lower-case name.
inline std::string by_name(std::string_view head) {
  auto const first = head.find("\r\n");
  if (first == std::string_view::npos) return std::string(head);
  std::vector<std::string_view> lines;
  for (auto rest = head.substr(first + 2); !rest.empty() && rest != "\r\n";) {
    auto const end = rest.find("\r\n");
    lines.push_back(rest.substr(0, end + 2));
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 2);
  }
  auto const lower_name = [](std::string_view line) {
    std::string name(line.substr(0, line.find(':')));
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return name;
  };
  std::stable_sort(lines.begin(), lines.end(),
                   [&](std::string_view a, std::string_view b) { return lower_name(a) < lower_name(b); });
  std::string out(head.substr(0, first + 2));
  for (auto const line : lines) out += line;
  out += "\r\n";
  return out;
}

inline bool same_head(std::string_view a, std::string_view b) { return by_name(a) == by_name(b); }

}  // namespace idemgate::test
