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

template <class Headers, class Insert>
StringResponse response_of(int status, const Headers& headers, Insert insert, std::string body, unsigned version,
                           bool keep_alive) {
  StringResponse res{static_cast<http::status>(status), version};
  for (auto const& h : headers) insert(res, h);
  strip_hop_by_hop(res, false);
  res.erase(http::field::content_length);
  add_via(res, 11);
  res.body() = std::move(body);
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

}  // namespace

StringResponse client_response(int status, const ledger::Headers& headers, std::string body, unsigned version,
                               bool keep_alive) {
  return response_of(
      status, headers, [](StringResponse& res, auto const& h) { res.insert(h.first, h.second); }, std::move(body),
      version, keep_alive);
}

StringResponse client_response(int status, const http::fields& headers, std::string body, unsigned version,
                               bool keep_alive) {
  return response_of(
      status, headers,
      [](StringResponse& res, auto const& f) { res.insert(f.name(), f.name_string(), f.value()); },
      std::move(body), version, keep_alive);
}

ledger::Headers headers_of(const http::fields& f) {
  ledger::Headers out;
  out.reserve(static_cast<std::size_t>(std::distance(f.begin(), f.end())));
  for (auto const& field : f) out.emplace_back(std::string(field.name_string()), std::string(field.value()));
  return out;
}

}  // namespace idemgate::proxy
