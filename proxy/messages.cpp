// Building guarded requests and answers (see messages.hpp).
#include "proxy/messages.hpp"

#include "proxy/http_rules.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>

namespace idemgate::proxy {

namespace http = boost::beast::http;

UpstreamRequest upstream_request(const http::request<http::buffer_body>& in, const Target& target,
                                 std::string_view body, bool guarded, std::string_view key_field,
                                 std::string_view key) {
  // The client's fields a hop passes on, less those this hop writes itself.
  auto kept = end_to_end_fields(in, true);
  auto const via = joined_via(kept, in.version());
  kept.erase(std::remove_if(kept.begin(), kept.end(), [&](const http::fields::value_type* f) {
    switch (f->name()) {
      case http::field::expect:
      case http::field::content_length:
      case http::field::host:
      case http::field::via:
        return true;
      case http::field::accept_encoding:
        return guarded;
      default:
        return !key_field.empty() && boost::beast::iequals(f->name_string(), key_field);
    }
  }), kept.end());
  // A length when there is a body, or when the method means to send one
  // (as Beast's prepare_payload: OPTIONS, PUT and POST say 0).
  auto const method = in.method();
  bool const length =
      !body.empty() || method == http::verb::options || method == http::verb::put || method == http::verb::post;
  char digits[20];
  std::string_view const size(digits, static_cast<std::size_t>(
                                          std::to_chars(digits, digits + sizeof digits, body.size()).ptr - digits));

  UpstreamRequest out{method, {}, body};
  std::string_view const method_string = in.method_string();
  // Room for all of it (the fixed names, separators and the port in 128).
  std::size_t bytes = method_string.size() + target.origin_form.size() + target.host.size() + via.size() +
                      key_field.size() + key.size() + 128;
  for (auto const* f : kept) bytes += f->name_string().size() + f->value().size() + 4;
  std::string& h = out.head;
  h.reserve(bytes);
  auto const field = [&h](std::string_view name, std::string_view value) {
    h += name;
    h += ": ";
    h += value;
    h += "\r\n";
  };
  h += method_string;
  h += ' ';
  h += target.origin_form;
  h += " HTTP/1.1\r\n";
  for (auto const* f : kept) field(f->name_string(), f->value());
  if (guarded) field("Accept-Encoding", "identity");
  h += "Host: ";
  target.append_authority(h);
  h += "\r\n";
  field("Via", via);
  if (!key_field.empty()) field(key_field, key);
  if (length) field("Content-Length", size);
  h += "\r\n";
  return out;
}

void head_of(const StringResponse& upstream, AnswerHead& head) {
  head.clear();
  head.status = upstream.result_int();
  for (auto const& f : upstream) head.append_field(f.name(), f.name_string(), f.value());
}

void head_of(int status, const ledger::Headers& headers, AnswerHead& head) {
  head.clear();
  head.status = static_cast<unsigned>(status);
  for (auto const& [name, value] : headers) head.append_field(http::string_to_field(name), name, value);
}

bool to_client(AnswerHead& head, std::size_t body_size, const AnswerTo& to) {
  head.reason = {};
  prepare_answer_head(head, to.version, false, to.keep_alive, to.guarded);
  auto const code = head.status;
  if (code / 100 == 1 || code == 204) {
    head.erase_all(http::field::content_length);
    return false;
  }
  if (to.head || code == 304) return false;
  head.set_content_length(body_size);
  return true;
}

ledger::Headers headers_of(const http::fields& f) {
  ledger::Headers out;
  out.reserve(static_cast<std::size_t>(std::distance(f.begin(), f.end())));
  for (auto const& field : f) out.emplace_back(std::string(field.name_string()), std::string(field.value()));
  return out;
}

ledger::Headers stored_answer_headers(const http::fields& f) {
  auto const kept = end_to_end_fields(f, false);  // in f's order
  ledger::Headers out;
  out.reserve(kept.size() + 1);
  auto next = kept.begin();
  for (auto const& field : f) {
    bool const end_to_end = next != kept.end() && *next == &field;
    if (end_to_end) ++next;
    if (end_to_end || field.name() == http::field::content_type)
      out.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  return out;
}

}  // namespace idemgate::proxy
