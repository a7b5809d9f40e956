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

// What the client gets for an answer whose head is `head` with `body`:
// what write_answer writes when there is no tail.
std::string wire(AnswerHead& head, std::string_view body, const AnswerTo& to) {
  bool const sends_body = to_client(head, body.size(), to);
  std::string out;
  render_head(head, out);
  if (sends_body) out += body;
  return out;
}

std::string wire(const StringResponse& up, const AnswerTo& to) {
  AnswerHead head;
  head_of(up, head);
  return wire(head, up.body(), to);
}

std::string wire(int status, const ledger::Headers& stored, std::string_view body, const AnswerTo& to) {
  AnswerHead head;
  head_of(status, stored, head);
  return wire(head, body, to);
}

// The same answer as Beast's serializer writes it from fields of its own:
// the rendering from views must match it byte for byte.
std::string beast_wire(const AnswerHead& head, std::string_view body) {
  StringResponse res{static_cast<http::status>(head.status), head.version};
  head.copy_to(res);
  res.body() = std::string(body);
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

TEST_CASE("to_client: an upstream answer") {
  std::string const bytes = wire(upstream_answer(), AnswerTo{10, false, false, true});
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

  // Persistence said only where it differs from the version's default.
  CHECK(wire(upstream_answer(), AnswerTo{11, true, false, true}).starts_with("HTTP/1.1 201 Created\r\nContent-Type"));
  CHECK(wire(upstream_answer(), AnswerTo{11, false, false, true})
            .find("1.1 idemgate\r\nConnection: close\r\nContent-Length: 13\r\n\r\n") != std::string::npos);
  CHECK(wire(upstream_answer(), AnswerTo{10, true, false, true})
            .find("1.1 idemgate\r\nConnection: keep-alive\r\nContent-Length: 13\r\n\r\n") != std::string::npos);
}

TEST_CASE("to_client: rendered from views as Beast's serializer writes the same fields") {
  for (unsigned version : {10u, 11u}) {
    for (bool keep_alive : {false, true}) {
      StringResponse const up = upstream_answer();
      AnswerHead head;
      head_of(up, head);
      AnswerTo const to{version, keep_alive, false, true};
      REQUIRE(to_client(head, up.body().size(), to));
      head.set("Idempotent-Replayed", "true");
      head.append_field(http::field::unknown, "Idemgate-Class", "ok");
      std::string rendered;
      render_head(head, rendered);
      CHECK(rendered + up.body() == beast_wire(head, up.body()));
    }
  }
}

TEST_CASE("to_client: a stored answer and the same upstream answer give the same bytes") {
  for (unsigned version : {10u, 11u}) {
    for (bool keep_alive : {false, true}) {
      StringResponse const up = upstream_answer();
      ledger::Headers const stored = stored_answer_headers(up);
      AnswerTo const to{version, keep_alive, false, true};
      CHECK(wire(up, to) == wire(201, stored, up.body(), to));
    }
  }
}

TEST_CASE("stored_answer_headers: the end-to-end fields in order, without the upstream connection's") {
  StringResponse up{http::status::ok, 11};
  up.insert("Server", "nginx/1.22.1");
  up.insert("Connection", "keep-alive, X-Hop");
  up.insert("Content-Type", "application/json");
  up.insert("Keep-Alive", "timeout=65");
  up.insert("X-Hop", "named by Connection");
  up.insert("Transfer-Encoding", "chunked");
  up.insert("Content-Length", "10");
  up.insert("Set-Cookie", "a=1");
  up.insert("Upgrade", "h2c");
  up.insert("Set-Cookie", "b=2");
  up.insert("Idemgate-Note", "an upstream's own field: stored as sent");
  ledger::Headers const want{{"Server", "nginx/1.22.1"},
                             {"Content-Type", "application/json"},
                             {"Content-Length", "10"},
                             {"Set-Cookie", "a=1"},
                             {"Set-Cookie", "b=2"},
                             {"Idemgate-Note", "an upstream's own field: stored as sent"}};
  CHECK(stored_answer_headers(up) == want);
  // Content-Type is kept even when a Connection names it: the body's
  // redaction and the MCP replay read it from the stored list.
  StringResponse named{http::status::ok, 11};
  named.insert("Connection", "Content-Type, X-Hop");
  named.insert("Content-Type", "application/x-www-form-urlencoded");
  named.insert("X-Hop", "1");
  named.insert("X-Id", "7");
  ledger::Headers const kept{{"Content-Type", "application/x-www-form-urlencoded"}, {"X-Id", "7"}};
  CHECK(stored_answer_headers(named) == kept);
  // All of them, when none is the connection's.
  StringResponse plain{http::status::created, 11};
  plain.insert("Content-Type", "application/json");
  plain.insert("Location", "/v1/charges/ch_1");
  plain.insert("Content-Length", "13");
  CHECK(stored_answer_headers(plain) == headers_of(plain));
  CHECK(stored_answer_headers(plain).size() == 3);
}

TEST_CASE("to_client: framing of answers without a body") {
  // 204 (and 1xx): no length at all, whatever the upstream said.
  StringResponse no_content{http::status::no_content, 11};
  no_content.insert("Content-Length", "0");
  no_content.insert("X-Id", "1");
  CHECK(wire(no_content, AnswerTo{11, true, false, true}) == "HTTP/1.1 204 No Content\r\nX-Id: 1\r\nVia: 1.1 idemgate\r\n\r\n");

  // A HEAD's answer and a 304 keep the upstream's length (the GET's
  // representation) and send no body.
  for (auto status : {http::status::ok, http::status::not_modified}) {
    StringResponse up{status, 11};
    up.insert("Content-Length", "1234");
    up.insert("ETag", "\"v1\"");
    up.body() = "never sent";
    bool const head = status == http::status::ok;
    std::string const bytes = wire(up, AnswerTo{11, true, head, true});
    CHECK(bytes.find("\r\nContent-Length: 1234\r\n") != std::string::npos);
    CHECK(bytes.ends_with("Via: 1.1 idemgate\r\n\r\n"));  // and nothing after the header
  }

  // The same 200 to a GET: its body's own length.
  StringResponse get{http::status::ok, 11};
  get.insert("Content-Length", "1234");
  get.body() = "abc";
  CHECK(wire(get, AnswerTo{11, true, false, true}).ends_with("Content-Length: 3\r\n\r\nabc"));
}

TEST_CASE("to_client: a stored answer replayed to a HEAD keeps its length") {
  ledger::Headers const stored{{"Content-Type", "application/json"}, {"Content-Length", "42"}};
  std::string const bytes = wire(200, stored, "", AnswerTo{11, true, true, true});
  CHECK(bytes.find("\r\nContent-Length: 42\r\n") != std::string::npos);
  CHECK(bytes.ends_with("\r\n\r\n"));
}

TEST_CASE("to_client: an unguarded buffered answer keeps the upstream's Idemgate-* fields") {
  // As the streamed pass-through path does: idemgate claims nothing there.
  CHECK(wire(upstream_answer(), AnswerTo{11, true, false, false}).find("\r\nIdemgate-Key: not-the-upstreams-to-say\r\n") !=
        std::string::npos);
  CHECK(wire(upstream_answer(), AnswerTo{11, true, false, true}).find("Idemgate-Key") == std::string::npos);
}

TEST_CASE("to_client: a stored answer's fields go out in their stored order") {
  // What headers_of stores is grouped by name already (Beast's order); a
  // list written otherwise is replayed as written, a repeated name apart.
  ledger::Headers const stored{{"Set-Cookie", "a=1"}, {"X-Id", "7"}, {"set-cookie", "b=2"}};
  CHECK(wire(200, stored, "", AnswerTo{11, true, false, true}) ==
        "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nX-Id: 7\r\nset-cookie: b=2\r\nVia: 1.1 idemgate\r\n"
        "Content-Length: 0\r\n\r\n");
}

TEST_CASE("AnswerHead::set replaces a field in any case, as Beast's set does") {
  ledger::Headers const stored{{"idempotent-replayed", "false"}, {"X-A", "1"}, {"IDEMPOTENT-REPLAYED", "x"}};
  AnswerHead head;
  head_of(200, stored, head);
  head.set("Idempotent-Replayed", "true");
  std::string rendered;
  render_head(head, rendered);
  CHECK(rendered == "HTTP/1.1 200 OK\r\nX-A: 1\r\nIdempotent-Replayed: true\r\n\r\n");
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

TEST_CASE("upstream_request: a length by method and body, as Beast's prepare_payload, Via by what passes the hop") {
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
