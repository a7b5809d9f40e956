// A Boost.JSON basic_parser handler that builds a value like the library's
// own, except that doubles are re-read from their text with std::from_chars
// (correctly rounded).
#include "policy/json_parse.hpp"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/value_stack.hpp>

#include <charconv>
#include <string>

namespace idemgate::policy {
namespace {

namespace json = boost::json;
using json::string_view;
using boost::system::error_code;

struct ExactNumbers {
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();

  json::value_stack st;
  std::string number;  // the parts of a number split across buffers
  std::size_t keys = 0;  // object members read, repeated names included

  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_object_begin(error_code&) { return true; }
  bool on_object_end(std::size_t n, error_code&) { st.push_object(n); return true; }
  bool on_array_begin(error_code&) { return true; }
  bool on_array_end(std::size_t n, error_code&) { st.push_array(n); return true; }
  bool on_key_part(string_view s, std::size_t, error_code&) { st.push_chars(s); return true; }
  bool on_key(string_view s, std::size_t, error_code&) {
    ++keys;
    st.push_key(s);
    return true;
  }
  bool on_string_part(string_view s, std::size_t, error_code&) { st.push_chars(s); return true; }
  bool on_string(string_view s, std::size_t, error_code&) { st.push_string(s); return true; }
  bool on_number_part(string_view s, error_code&) { number.append(s.data(), s.size()); return true; }
  bool on_int64(std::int64_t i, string_view, error_code&) { number.clear(); st.push_int64(i); return true; }
  bool on_uint64(std::uint64_t u, string_view, error_code&) { number.clear(); st.push_uint64(u); return true; }
  bool on_double(double d, string_view s, error_code&) {
    number.append(s.data(), s.size());
    double exact = 0;
    const auto [end, err] = std::from_chars(number.data(), number.data() + number.size(), exact);
    // Out of range (1e400) keeps what Boost.JSON made of it.
    if (err == std::errc{} && end == number.data() + number.size()) d = exact;
    number.clear();
    st.push_double(d);
    return true;
  }
  bool on_bool(bool b, error_code&) { st.push_bool(b); return true; }
  bool on_null(error_code&) { st.push_null(); return true; }
  bool on_comment_part(string_view, error_code&) { return true; }
  bool on_comment(string_view, error_code&) { return true; }
};

// Members of every object in `v`: fewer than the names read when an object
// named one twice (it keeps one of them).
std::size_t members(const json::value& v) {
  std::size_t n = 0;
  if (const auto* o = v.if_object()) {
    for (const auto& member : *o) n += 1 + members(member.value());
  } else if (const auto* a = v.if_array()) {
    for (const auto& element : *a) n += members(element);
  }
  return n;
}

}  // namespace

json::value parse_json(std::string_view text, error_code& ec, bool* repeated_names) {
  json::basic_parser<ExactNumbers> parser(json::parse_options{});
  parser.handler().st.reset();
  const auto used = parser.write_some(false, text.data(), text.size(), ec);
  if (!ec && used < text.size()) ec = json::error::extra_data;
  if (ec) return nullptr;
  auto value = parser.handler().st.release();
  if (repeated_names) *repeated_names = members(value) != parser.handler().keys;
  return value;
}

}  // namespace idemgate::policy
