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

namespace {

// What every answer to the client gets: no hop-by-hop field (on a guarded
// call no Idemgate-* field either but the ones this hop sets afterwards: an
// upstream cannot speak for idemgate), this hop in Via, the client's
// keep-alive, and framing of its own. A 1xx or 204 carries no length and no body; a 304 and the answer to
// a HEAD carry no body, and keep the upstream's Content-Length, which
// describes the representation a GET would get; any other answer's length
// is its body's.
StringResponse finish_response(StringResponse res, std::string body, const AnswerTo& to) {
  strip_hop_by_hop(res, to.guarded);
  add_via(res, 11);
  res.keep_alive(to.keep_alive);
  auto const code = res.result_int();
  if (code / 100 == 1 || code == 204) {
    res.erase(http::field::content_length);
  } else if (!to.head && code != 304) {
    res.body() = std::move(body);
    res.content_length(res.body().size());
  }
  return res;
}

}  // namespace

StringResponse client_response(int status, const ledger::Headers& headers, std::string body, const AnswerTo& to) {
  StringResponse res{static_cast<http::status>(status), to.version};
  for (auto const& [name, value] : headers) res.insert(name, value);
  return finish_response(std::move(res), std::move(body), to);
}

StringResponse client_response(StringResponse&& upstream, const AnswerTo& to) {
  StringResponse res;
  res.base() = std::move(upstream.base());
  res.version(to.version);
  res.reason({});  // the status's own text, as for a stored answer
  return finish_response(std::move(res), std::move(upstream.body()), to);
}

ledger::Headers headers_of(const http::fields& f) {
  ledger::Headers out;
  out.reserve(static_cast<std::size_t>(std::distance(f.begin(), f.end())));
  for (auto const& field : f) out.emplace_back(std::string(field.name_string()), std::string(field.value()));
  return out;
}

}  // namespace idemgate::proxy
