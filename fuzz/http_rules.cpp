// The request-head rules the proxy applies to bytes from any client: the raw
// header checks, Beast's header parser, target parsing (absolute-form,
// authority-form, gateway routes), framing and hop-by-hop stripping.
// Input: the raw bytes a client sends.
#include "fuzz/split.hpp"
#include "proxy/http_rules.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace http = boost::beast::http;
using namespace idemgate::proxy;

namespace {

void check_target(const Target& t) {
  // What the session derives from a target must be consistent with it.
  if (t.host.empty() || t.port == 0 || t.origin_form.empty()) std::abort();
  if (t.scheme != "http" && t.scheme != "https") std::abort();
  (void)t.authority();
  (void)t.pool_key();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = idemgate::fuzz::as_text(data, size);
  const auto raw = check_raw_header(bytes, 8 * 1024);
  if (raw.error == RawHeaderError::none && (raw.header_size == 0 || raw.header_size > bytes.size())) std::abort();

  // The session parses only heads that passed the raw checks; the fuzzer also
  // feeds the parser the rest, as a later Beast version might see it.
  http::request_parser<http::empty_body> parser;
  parser.header_limit(64 * 1024);
  parser.eager(false);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  if (!parser.is_header_done()) return 0;
  auto& req = parser.get();

  (void)acceptable_request_transfer_encoding(req);
  const std::string_view target_text = req.target();
  // parse_absolute_target's plain reader must read exactly as the grammar does.
  if (auto plain = detail::parse_plain_absolute_target(target_text)) {
    const auto grammar = detail::parse_absolute_target_by_grammar(target_text);
    if (!grammar || plain->scheme != grammar->scheme || plain->host != grammar->host ||
        plain->port != grammar->port || plain->origin_form != grammar->origin_form ||
        plain->host_is_ip != grammar->host_is_ip)
      std::abort();
  }
  if (req.method() == http::verb::connect) {
    if (auto t = parse_authority_target(target_text)) check_target(*t);
  } else if (auto t = parse_absolute_target(target_text)) {
    check_target(*t);
    // A gateway route whose upstream is the request's own URL.
    if (auto routed = route_target("/", target_text, t->origin_form)) check_target(*routed);
  } else if (!target_text.empty() && target_text.front() == '/') {
    const auto second = target_text.find('/', 1);
    const auto prefix = target_text.substr(0, second == std::string_view::npos ? target_text.size() : second + 1);
    if (auto routed = route_target(prefix, "http://upstream.test/base/", target_text)) check_target(*routed);
    const auto host = req[http::field::host];
    if (auto routed = route_target("/", "https://" + std::string(host) + "/v1/", target_text)) check_target(*routed);
  }
  // An upstream's Keep-Alive header is read by the same rules.
  if (auto const t = keep_alive_timeout(req[http::field::keep_alive]); t && t->count() <= 0) std::abort();
  // What a hop passes on, read without changing the fields, is what
  // stripping leaves, in order.
  std::vector<std::pair<std::string, std::string>> passed;
  for (const auto* field : end_to_end_fields(req, true))
    passed.emplace_back(std::string(field->name_string()), std::string(field->value()));
  strip_hop_by_hop(req, true);
  std::size_t i = 0;
  for (const auto& field : req) {
    if (i >= passed.size() || passed[i].first != field.name_string() || passed[i].second != field.value()) std::abort();
    ++i;
  }
  if (i != passed.size()) std::abort();
  for (const auto& field : req) {
    const auto name = field.name_string();
    if (name.size() >= 9 && (name.substr(0, 9) == "Idemgate-" || name.substr(0, 9) == "idemgate-")) std::abort();
    if (field.name() == http::field::connection || field.name() == http::field::transfer_encoding) std::abort();
  }
  add_via(req, req.version());
  return 0;
}
