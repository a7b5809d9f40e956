// The messages of a guarded call (proxy/messages.hpp). The answer a client
// gets: built from the upstream's answer taken over whole, or from a stored
// one; both must put the same bytes on the wire for the same answer. The
// request the upstream gets, rendered from the client's fields.
#include "proxy/http_rules.hpp"
#include "proxy/messages.hpp"

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/serializer.hpp>

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

using namespace idemgate;
using namespace idemgate::proxy;
namespace http = boost::beast::http;

namespace {

// What Beast's serializer writes for `res`, header and body.
std::string wire(StringResponse& res) {
  http::serializer<false, http::string_body> sr{res};
  std::string out;
  boost::beast::error_code ec;
  while (!sr.is_done()) {
    sr.next(ec, [&](boost::beast::error_code&, auto const& buffers) {
      out += boost::beast::buffers_to_string(buffers);
      sr.consume(boost::beast::buffer_bytes(buffers));
    });
    REQUIRE(!ec);
  }
  return out;
}

// An upstream answer with a reason of its own, hop-by-hop fields, a stale
// length, a Via from an earlier hop, a field only idemgate may set and a
// repeated field.
StringResponse upstream_answer() {
  StringResponse up{http::status::created, 11};
  up.reason("Made");
  up.insert("Content-Type", "application/json");
  up.insert("Connection", "keep-alive, X-Hop");
  up.insert("X-Hop", "1");
  up.insert("Keep-Alive", "timeout=65");
  up.insert("Set-Cookie", "a=1");
  up.insert("Content-Length", "999");
  up.insert("Via", "1.1 earlier");
  up.insert("Idemgate-Key", "not-the-upstreams-to-say");
  up.insert("Set-Cookie", "b=2");
  up.body() = R"({"id":"ch_1"})";
  return up;
}

}  // namespace

TEST_CASE("client_response: an upstream answer taken over whole") {
  StringResponse res = client_response(upstream_answer(), AnswerTo{10, false, false, true});
  std::string const bytes = wire(res);
  // The client's version, the status's own text (not the upstream's
  // reason), no hop-by-hop field, no Idemgate-* field from upstream, this
  // hop added to Via, the body's own length, the client's keep-alive.
  CHECK(bytes ==
        "HTTP/1.0 201 Created\r\n"
        "Content-Type: application/json\r\n"
        "Set-Cookie: a=1\r\n"
        "Set-Cookie: b=2\r\n"  // Beast's fields keep a name's fields together
        "Via: 1.1 earlier, 1.1 idemgate\r\n"
        "Content-Length: 13\r\n"
        "\r\n"
        R"({"id":"ch_1"})");

  StringResponse kept = client_response(upstream_answer(), AnswerTo{11, true, false, true});
  CHECK(kept.keep_alive());
  CHECK(wire(kept).starts_with("HTTP/1.1 201 Created\r\n"));
}

TEST_CASE("client_response: a stored answer and the same upstream answer give the same bytes") {
  for (unsigned version : {10u, 11u}) {
    for (bool keep_alive : {false, true}) {
      StringResponse up = upstream_answer();
      ledger::Headers stored = headers_of(up);
      std::string body = up.body();
      StringResponse from_up = client_response(std::move(up), AnswerTo{version, keep_alive, false, true});
      StringResponse from_stored = client_response(201, stored, body, AnswerTo{version, keep_alive, false, true});
      CHECK(wire(from_up) == wire(from_stored));
    }
  }
}

TEST_CASE("client_response: framing of answers without a body") {
  // 204 (and 1xx): no length at all, whatever the upstream said.
  StringResponse no_content{http::status::no_content, 11};
  no_content.insert("Content-Length", "0");
  no_content.insert("X-Id", "1");
  StringResponse res = client_response(std::move(no_content), AnswerTo{11, true, false, true});
  CHECK(wire(res) == "HTTP/1.1 204 No Content\r\nX-Id: 1\r\nVia: 1.1 idemgate\r\n\r\n");

  // A HEAD's answer and a 304 keep the upstream's length (the GET's
  // representation) and send no body.
  for (auto status : {http::status::ok, http::status::not_modified}) {
    StringResponse up{status, 11};
    up.insert("Content-Length", "1234");
    up.insert("ETag", "\"v1\"");
    bool const head = status == http::status::ok;
    StringResponse out = client_response(std::move(up), AnswerTo{11, true, head, true});
    std::string const bytes = wire(out);
    CHECK(out[http::field::content_length] == "1234");
    CHECK(out.body().empty());
    CHECK(bytes.find("\r\nContent-Length: 1234\r\n") != std::string::npos);
    CHECK(bytes.ends_with("Via: 1.1 idemgate\r\n\r\n"));  // and nothing after the header
  }

  // The same 200 to a GET: its body's own length.
  StringResponse get{http::status::ok, 11};
  get.insert("Content-Length", "1234");
  get.body() = "abc";
  StringResponse out = client_response(std::move(get), AnswerTo{11, true, false, true});
  CHECK(wire(out).ends_with("Content-Length: 3\r\n\r\nabc"));
}

TEST_CASE("client_response: a stored answer replayed to a HEAD keeps its length") {
  ledger::Headers stored{{"Content-Type", "application/json"}, {"Content-Length", "42"}};
  StringResponse res = client_response(200, stored, "", AnswerTo{11, true, true, true});
  CHECK(res[http::field::content_length] == "42");
  CHECK(res.body().empty());
}

TEST_CASE("client_response: an unguarded buffered answer keeps the upstream's Idemgate-* fields") {
  // As the streamed pass-through path does: idemgate claims nothing there.
  StringResponse res = client_response(upstream_answer(), AnswerTo{11, true, false, false});
  CHECK(res["Idemgate-Key"] == "not-the-upstreams-to-say");
  StringResponse guarded = client_response(upstream_answer(), AnswerTo{11, true, false, true});
  CHECK(guarded.count("Idemgate-Key") == 0);
}

namespace {

http::request<http::buffer_body> client_request(std::string_view method, unsigned version,
                                                std::vector<std::pair<std::string, std::string>> fields) {
  http::request<http::buffer_body> in;
  in.method_string(method);
  in.target("http://api.example.test:8443/v1/charges?x=1");
  in.version(version);
  for (auto const& [name, value] : fields) in.insert(name, value);
  return in;
}

}  // namespace

TEST_CASE("upstream_request: the client's fields a hop passes on, then this hop's, rendered once") {
  auto const target = *parse_absolute_target("http://api.example.test:8443/v1/charges?x=1");
  // Hop-by-hop fields (and the one Connection names), an Idemgate-* field,
  // Expect, a stale length, the wrong Host, an encoding a guarded call must
  // not get, two earlier hops in Via, and the agent's own key in another case.
  auto const in = client_request("POST", 11,
                                 {{"Content-Type", "application/json"},
                                  {"Connection", "close, X-Trace-Hop"},
                                  {"X-Trace-Hop", "1"},
                                  {"Keep-Alive", "timeout=5"},
                                  {"Proxy-Authorization", "Basic eA=="},
                                  {"TE", "trailers"},
                                  {"Idemgate-Run", "run-1"},
                                  {"Expect", "100-continue"},
                                  {"Content-Length", "99"},
                                  {"Host", "elsewhere.test"},
                                  {"Accept-Encoding", "gzip"},
                                  {"Via", "1.0 first"},
                                  {"idempotency-key", "the-agents"},
                                  {"Via", "1.1 second"},
                                  {"User-Agent", "t"}});
  std::string const body = R"({"amount":100})";
  auto const out = upstream_request(in, target, body, true, "Idempotency-Key", "k-1");
  CHECK(out.method == http::verb::post);
  CHECK(out.body == body);
  CHECK(out.head ==
        "POST /v1/charges?x=1 HTTP/1.1\r\n"
        "Content-Type: application/json\r\n"
        "User-Agent: t\r\n"
        "Accept-Encoding: identity\r\n"
        "Host: api.example.test:8443\r\n"
        "Via: 1.0 first, 1.1 second, 1.1 idemgate\r\n"
        "Idempotency-Key: k-1\r\n"
        "Content-Length: 14\r\n"
        "\r\n");

  // Not guarded, no key: the client's encoding and key field stay; a
  // body-less GET has no length; an HTTP/1.0 client's hop is 1.0 in Via,
  // the request upstream HTTP/1.1.
  auto const get = client_request("GET", 10, {{"Accept-Encoding", "gzip"}, {"Idempotency-Key", "a"}});
  CHECK(upstream_request(get, target, {}, false).head ==
        "GET /v1/charges?x=1 HTTP/1.1\r\n"
        "Accept-Encoding: gzip\r\n"
        "Idempotency-Key: a\r\n"
        "Host: api.example.test:8443\r\n"
        "Via: 1.0 idemgate\r\n"
        "\r\n");

  // A body-less POST says its length is 0; the default port is not named.
  auto const plain = *parse_absolute_target("http://api.example.test/v1/x");
  CHECK(upstream_request(client_request("POST", 11, {}), plain, {}, true).head ==
        "POST /v1/x HTTP/1.1\r\n"
        "Accept-Encoding: identity\r\n"
        "Host: api.example.test\r\n"
        "Via: 1.1 idemgate\r\n"
        "Content-Length: 0\r\n"
        "\r\n");
}

TEST_CASE("upstream_request: a length by method and body, as Beast's prepare_payload; Via by what passes the hop") {
  auto const target = *parse_absolute_target("http://[::1]:9/x");
  auto const length_of = [&](std::string_view method, std::string_view body) {
    auto const head = upstream_request(client_request(method, 11, {}), target, body, false).head;
    auto const at = head.find("Content-Length: ");
    return at == std::string::npos ? std::string("none") : head.substr(at + 16, head.find('\r', at) - at - 16);
  };
  CHECK(length_of("OPTIONS", "") == "0");
  CHECK(length_of("PUT", "") == "0");
  CHECK(length_of("POST", "") == "0");
  CHECK(length_of("GET", "") == "none");
  CHECK(length_of("HEAD", "") == "none");
  CHECK(length_of("DELETE", "") == "none");
  CHECK(length_of("PATCH", "") == "none");
  CHECK(length_of("GET", "abc") == "3");
  CHECK(length_of("DELETE", "ab") == "2");
  CHECK(length_of("FROBNICATE", "abcd") == "4");
  CHECK(upstream_request(client_request("FROBNICATE", 11, {}), target, {}, false).head ==
        "FROBNICATE /x HTTP/1.1\r\nHost: [::1]:9\r\nVia: 1.1 idemgate\r\n\r\n");
  // Connection (or Proxy-Connection) naming Via drops the earlier hops; an
  // empty Via names none.
  CHECK(upstream_request(client_request("GET", 11, {{"Connection", "Via"}, {"Via", "1.0 a"}}), target, {}, false)
            .head == "GET /x HTTP/1.1\r\nHost: [::1]:9\r\nVia: 1.1 idemgate\r\n\r\n");
  CHECK(upstream_request(client_request("GET", 11, {{"Proxy-Connection", "x-a"}, {"X-A", "1"}, {"Via", ""}, {"X-B", "2"}}),
                         target, {}, false)
            .head == "GET /x HTTP/1.1\r\nX-B: 2\r\nHost: [::1]:9\r\nVia: 1.1 idemgate\r\n\r\n");
}

TEST_CASE("add_via: every earlier hop in one Via, this hop last") {
  http::fields f;
  f.insert("Via", "1.0 a");
  f.insert("X", "y");
  f.insert("Via", "1.1 b");
  add_via(f, 11);
  CHECK(f.count(http::field::via) == 1);
  CHECK(f[http::field::via] == "1.0 a, 1.1 b, 1.1 idemgate");
  http::fields none;
  add_via(none, 10);
  CHECK(none[http::field::via] == "1.0 idemgate");
}
