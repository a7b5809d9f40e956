// An upstream answer's header as the pass-through path reads it: the status
// line and the fields in one flat list of views into the connection's read
// buffer. Beast's basic_fields allocates and indexes every field; an answer
// that is only rewritten (hop-by-hop fields out, Via in) and rendered back
// needs neither. The commonest headers (a final status, Content-Length,
// printable ASCII, no folding) are read by read_plain_answer_head without a
// parser; every other one by AnswerParser, from Beast's own basic_parser, so
// the grammar, the limits and the framing (Content-Length, chunked,
// keep-alive) are Beast's, unchanged, and the plain reader only takes what
// Beast would read the same way.
#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/container/small_vector.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace idemgate::proxy {

// One field; the same accessors as Beast's fields::value_type, so the header
// rules are written once for both.
class HeadField {
public:
  HeadField(boost::beast::http::field name, std::string_view name_string, std::string_view value) noexcept
      : name_(name), name_string_(name_string), value_(value) {}

  boost::beast::http::field name() const noexcept { return name_; }
  std::string_view name_string() const noexcept { return name_string_; }
  std::string_view value() const noexcept { return value_; }

private:
  boost::beast::http::field name_;
  std::string_view name_string_;
  std::string_view value_;
};

// The views point into the bytes the parser read (the connection's buffer,
// which must not be consumed or grown while the head is in use) or into the
// head's own storage (folded values, the joined Via).
class AnswerHead {
public:
  using List = boost::container::small_vector<HeadField, 12>;
  using iterator = List::iterator;
  using const_iterator = List::const_iterator;

  AnswerHead() = default;
  // Views may point into the head's own storage: a copy would point into
  // the original's.
  AnswerHead(const AnswerHead&) = delete;
  AnswerHead& operator=(const AnswerHead&) = delete;

  unsigned status = 0;
  unsigned version = 11;
  std::string_view reason;  // as sent; may be empty

  iterator begin() noexcept { return fields_.begin(); }
  iterator end() noexcept { return fields_.end(); }
  const_iterator begin() const noexcept { return fields_.begin(); }
  const_iterator end() const noexcept { return fields_.end(); }
  iterator erase(const_iterator it) { return fields_.erase(it); }
  const_iterator find(boost::beast::http::field name) const noexcept;
  void erase_all(boost::beast::http::field name);
  std::size_t size() const noexcept { return fields_.size(); }

  // A field whose bytes outlive the head (the parsed input, or a literal);
  // append() names it as Beast does (the field's canonical spelling).
  void append_field(boost::beast::http::field name, std::string_view name_string, std::string_view value) {
    fields_.emplace_back(name, name_string, value);
  }
  void append(boost::beast::http::field name, std::string_view value);
  // A field whose value is copied into the head (at most one at a time:
  // a second call replaces the storage the first one's view points into).
  void append_copy(boost::beast::http::field name, std::string value);
  // Content-Length, replacing any: its digits are kept in the head.
  void set_content_length(std::uint64_t length);
  // As Beast's fields::set: every field named `name` (in any case) out, then
  // this one appended. Both views must outlive the head's use.
  void set(std::string_view name, std::string_view value);
  // Folded values (obs-fold) rewritten by the parser: copied, never more
  // bytes in all than `bound` (the bytes being parsed), so the storage is
  // reserved once and earlier views stay valid.
  std::string_view keep_folded(std::string_view value, std::size_t bound);

  void clear() noexcept;

  // Into Beast's fields, for the paths that stream a body through Beast's
  // serializer.
  void copy_to(boost::beast::http::fields& out) const;

private:
  List fields_;
  std::string folded_;
  std::string copied_;
  char length_[20] = {};
};

// How the body after an answer header is framed, as the pass-through path
// decides from it (the names and meanings of Beast's parser's accessors).
struct AnswerFraming {
  std::size_t header_size = 0;  // the header's bytes, at the front of the input
  bool chunked = false;
  bool done = false;  // no body follows the header
  bool keep_alive = false;
  bool need_eof = false;  // the body ends where the connection does
  boost::optional<std::uint64_t> content_length;
};

// Reads the commonest answer header whole without Beast's parser, which
// takes about twice the instructions (its byte-at-a-time loops and its
// token lists; bench/HISTORY.md, 2026-12-07 11:26Z): HTTP/1.0 or 1.1, a final status of 200-599, a framing of
// Content-Length (or none on a 204 or 304), and fields of printable ASCII
// with no line folding, no Transfer-Encoding, Upgrade or Proxy-Connection,
// and a Connection of "close" or "keep-alive" alone. Anything else, a header
// not yet whole, or one of header_limit bytes or more: false, head cleared,
// and the caller parses with AnswerParser. What it accepts, Beast's parser
// accepts, reading the same head and framing (tests/proxy/answer_head_paths.hpp
// and the answer_head fuzz target compare the two). Views into `bytes`.
bool read_plain_answer_head(std::string_view bytes, std::size_t header_limit, AnswerHead& head,
                            AnswerFraming& framing);

// Beast's parser with the header kept in an AnswerHead. It reads the
// header only (the body is relayed by the caller, or re-read by Beast's
// own parser): any body callback is an error.
class AnswerParser final : public boost::beast::http::basic_parser<false> {
public:
  explicit AnswerParser(AnswerHead& head) noexcept : head_(head) { head_.clear(); }

  // The bytes the next put() is given: the fields are views into them.
  void input(std::string_view bytes) noexcept { input_ = bytes; }
  // Once the header is done: its framing, the header `header_size` bytes.
  AnswerFraming framing(std::size_t header_size) const;

private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;

  std::string_view kept(string_view s);

  void on_request_impl(boost::beast::http::verb, string_view, string_view, int, error_code&) override {}
  void on_response_impl(int code, string_view reason, int version, error_code&) override;
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code&) override;
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(boost::optional<std::uint64_t> const&, error_code& ec) override;
  std::size_t on_body_impl(string_view, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t, string_view, error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t, string_view, error_code& ec) override;
  void on_finish_impl(error_code&) override {}

  AnswerHead& head_;
  std::string_view input_;
};

}  // namespace idemgate::proxy
