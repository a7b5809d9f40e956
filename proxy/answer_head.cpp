// A flat upstream answer header and the parser that fills it (see
// answer_head.hpp).
#include "proxy/answer_head.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <charconv>

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
