// Building guarded requests and answers (see messages.hpp).
#include "proxy/messages.hpp"

namespace idemgate::proxy {

namespace http = boost::beast::http;

StringRequest upstream_request(const http::request<http::buffer_body>& in, const Target& target, std::string body,
                               bool guarded) {
  StringRequest out{in.method(), target.origin_form, 11};
  for (auto const& f : in) out.insert(f.name_string(), f.value());
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

StringResponse client_response(int status, const ledger::Headers& headers, std::string body, unsigned version,
                               bool keep_alive) {
  StringResponse res{static_cast<http::status>(status), version};
  for (auto const& [name, value] : headers) res.insert(name, value);
  strip_hop_by_hop(res, false);
  res.erase(http::field::content_length);
  add_via(res, 11);
  res.body() = std::move(body);
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

ledger::Headers headers_of(const http::fields& f) {
  ledger::Headers out;
  for (auto const& field : f) out.emplace_back(std::string(field.name_string()), std::string(field.value()));
  return out;
}

}  // namespace idemgate::proxy
