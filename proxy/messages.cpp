// Building guarded requests and answers (see messages.hpp).
#include "proxy/messages.hpp"

#include <iterator>

namespace idemgate::proxy {

namespace http = boost::beast::http;

StringRequest upstream_request(const http::request<http::buffer_body>& in, const Target& target, std::string body,
                               bool guarded) {
  StringRequest out{in.method(), target.origin_form, 11};
  // By the parsed field as well as its spelling: no name lookup per field.
  for (auto const& f : in) out.insert(f.name(), f.name_string(), f.value());
  if (in.method() == http::verb::unknown) out.method_string(in.method_string());
  strip_hop_by_hop(out, true);
  out.erase(http::field::expect);
  out.erase(http::field::content_length);
  if (guarded) out.set(http::field::accept_encoding, "identity");
  out.set(http::field::host, target.authority());
  add_via(out, in.version());
  out.body() = std::move(body);
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
