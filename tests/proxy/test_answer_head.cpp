// The flat answer head (AnswerParser, prepare_answer_head, render_head) against
// the same steps on Beast's own parser and fields: the pass-through path must
// send the client byte for byte what it sent when it used basic_fields.
#include "tests/proxy/answer_head_paths.hpp"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

using namespace idemgate::proxy;
using namespace idemgate::test;
namespace http = boost::beast::http;
namespace asio = boost::asio;

namespace {

std::string random_answer(std::mt19937& rng) {
  auto pick = [&](auto const& options) { return options[rng() % options.size()]; };
  static const std::vector<std::string> status_lines = {
      "HTTP/1.1 200 OK",      "HTTP/1.1 201 Created",   "HTTP/1.0 200 OK",  "HTTP/1.1 204 No Content",
      "HTTP/1.1 304 Not Modified", "HTTP/1.1 299 Fine", "HTTP/1.1 200 ",    "HTTP/1.1 404 Not Found",
      "HTTP/1.1 502 Bad Gateway",  "HTTP/1.1 100 Continue", "HTTP/1.1 599 x y z", "HTTP/1.1 200 OK\t",
      "HTTP/2.0 200 OK",           "HTTP/1.1 20 OK",        "HTTP/1.1 600 Six", "HTTP/1.1 200 caf\xc3\xa9",
      "HTTP/1.1 200OK"};
  static const std::vector<std::string> fields = {
      "Server: nginx/1.22.1",
      "Date: Sat, 05 Dec 2026 23:00:00 GMT",
      "Content-Type: text/plain",
      "content-type:application/json  ",
      "Connection: keep-alive",
      "Connection: close",
      "connection: X-A, keep-alive",
      "Connection: x-b x-c, X-D;q=1",
      "Proxy-Connection: X-A",
      "Keep-Alive: timeout=5, max=100",
      "Via: 1.0 upstream",
      "Via: ",
      "via: 1.1 a, 1.1 b",
      "X-A: 1",
      "x-b: 2",
      "X-C: three",
      "X-D: \t four \t",
      "X-Kept: yes",
      "Set-Cookie: a=1",
      "Set-Cookie: b=2",
      "Trailer: Expires",
      "Upgrade: h2c",
      "TE: trailers",
      "Idemgate-Intent: kept on answers",
      "Cache-Control: no-cache,\r\n  no-store",  // obs-fold
      "X-Folded: a\r\n\tb\r\n c",
      "Content-Length: 3",
      "Content-Length: 0",
      "Content-Length: 100000000",
      "Transfer-Encoding: chunked",
      "Transfer-Encoding: gzip, chunked",
      "Transfer-Encoding: gzip",
      // Near misses of the plain reader (read_plain_answer_head), each
      // left to Beast's parser, which takes some and refuses others.
      "Content-Length: 007",
      "Content-Length: 3, 3",
      "Content-Length:  42 \t",
      "Content-Length: 99999999999999999999",
      "Content-Length: -1",
      "Connection: Keep-Alive",
      "connection: CLOSE",
      "Connection: keep-alive, close",
      "X-Obs: caf\xc3\xa9",
      "X-Del: a\x7f",
      "Bad Name: x",
      "X-CR: a\rb",
      "X-LF: a\nb",
      "Empty:",
      ": no name",
      "X-Colon: a:b:c",
  };
  std::string text = pick(status_lines) + "\r\n";
  auto const count = rng() % 9;
  for (unsigned i = 0; i < count; ++i) text += pick(fields) + "\r\n";
  text += "\r\n";
  return text;
}

// Puts bytes into p, which keeps views into them.
std::size_t put(AnswerParser& p, std::string_view bytes, boost::beast::error_code& ec) {
  p.input(bytes);
  return p.put(asio::buffer(bytes.data(), bytes.size()), ec);
}

// The flat path reads bytes as Beast's parser and fields do: whether Beast
// read them, and whether the plain reader did.
struct Read {
  bool ok = false;
  bool plain = false;
};
Read reads_as_beast(std::string const& bytes, Framing const& f, AnswerHead& head) {
  // What the plain reader read, before any rewriting, is what Beast's
  // grammar reads into the same flat head: status, version, reason, and
  // every field in the upstream's order, with its name as Beast knows it.
  AnswerHead plain_head;
  AnswerFraming plain_framing;
  if (!f.head_request && read_plain_answer_head(bytes, kHeaderLimit, plain_head, plain_framing)) {
    AnswerHead beast_head;
    AnswerParser p(beast_head);
    p.body_limit(boost::none);  // as forward.cpp: the length is the relay's business
    boost::beast::error_code ec;
    CHECK(put(p, bytes, ec) == plain_framing.header_size);
    REQUIRE_FALSE(ec);
    CHECK(plain_head.status == beast_head.status);
    CHECK(plain_head.version == beast_head.version);
    CHECK(plain_head.reason == beast_head.reason);
    REQUIRE(plain_head.size() == beast_head.size());
    for (auto a = plain_head.begin(), b = beast_head.begin(); a != plain_head.end(); ++a, ++b) {
      CHECK(a->name() == b->name());
      CHECK(a->name_string() == b->name_string());
      CHECK(a->value() == b->value());
    }
  }
  auto const beast = through_beast(bytes, f);
  auto const flat = through_flat(bytes, f, head);
  REQUIRE(beast.ok == flat.ok);
  if (!beast.ok) return {false, flat.plain};
  CHECK(by_name(flat.head) == by_name(beast.head));
  CHECK(flat.header_size == beast.header_size);
  CHECK(flat.chunked == beast.chunked);
  CHECK(flat.done == beast.done);
  CHECK(flat.keep_alive == beast.keep_alive);
  CHECK(flat.need_eof == beast.need_eof);
  CHECK((flat.content_length == beast.content_length));
  CHECK(by_name(through_copy(head, bytes, f)) == by_name(beast.head));
  return {true, flat.plain};
}

}  // namespace

TEST_CASE("answer head: the flat path renders what Beast's fields rendered, on random answers") {
  std::mt19937 rng(20261206);
  AnswerHead head;  // reused across answers, as on a pooled connection
  int compared = 0, refused = 0, plain = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string const text = random_answer(rng);
    Framing const f{rng() % 2 ? 11u : 10u, rng() % 3 != 0, rng() % 5 == 0};
    // The bytes after the header must not matter to the views.
    std::string const bytes = text + "abc";
    INFO("answer: ", text, "client version ", f.client_version, ", keep-alive ", f.client_wants_keep_alive,
         ", HEAD ", f.head_request);
    auto const read = reads_as_beast(bytes, f, head);
    if (!read.ok) {
      ++refused;
      continue;
    }
    ++compared;
    plain += read.plain;
  }
  // Each kind is seen, so the comparison means something: answers refused,
  // and answers read by each of the flat path's two readers.
  MESSAGE("compared ", compared, " (", plain, " read plain), refused ", refused);
  CHECK(compared > 5000);
  CHECK(refused > 100);
  CHECK(plain > 500);
  CHECK(compared - plain > 1000);
}

TEST_CASE("answer head: the commonest answers are read without Beast's parser, as Beast reads them") {
  std::vector<std::string> const plain = {
      // nginx's answer in bench/passthrough
      "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Mon, 07 Dec 2026 12:00:00 GMT\r\n"
      "Content-Type: text/plain\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\nok\n",
      "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n",
      "HTTP/1.1 304 Not Modified\r\nContent-Length: 120\r\nETag: \"x\"\r\n\r\n",
      "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi",
      "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi",
      "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 5\r\n\r\nbusy\n",
      "HTTP/1.1 200 \r\nX-Empty:\r\nX-Spaces: \t a b \t\r\ncontent-length:1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nContent-Length: 123456789012345678\r\n\r\n",
      "HTTP/1.1 299 Fine, thanks\r\nContent-Length: 007\r\nKeep-Alive: timeout=5\r\nVia: 1.1 a\r\n\r\n",
  };
  std::vector<std::string> const near_misses = {
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nServer: x\r\n\r\nto the end",
      "HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc",
      "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
      "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
      "HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-Obs: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nConnection: keep-alive, Upgrade\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nUpgrade: websocket\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nProxy-Connection: close\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n",
      "HTTP/1.1 200 OK\nContent-Length: 0\n\n",
      "HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-CR: a\rb\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-Big: " + std::string(9000, 'a') + "\r\nContent-Length: 0\r\n\r\n",
  };
  AnswerHead head;  // reused, as on a pooled connection: a near miss must leave nothing behind
  for (auto const& bytes : plain) {
    INFO("answer: ", bytes);
    CHECK(reads_as_beast(bytes, Framing{}, head).plain);
    CHECK(reads_as_beast(bytes, Framing{10, false, false}, head).plain);
  }
  for (auto const& bytes : near_misses) {
    INFO("answer: ", bytes);
    CHECK_FALSE(reads_as_beast(bytes, Framing{}, head).plain);
    AnswerFraming framing;
    CHECK_FALSE(read_plain_answer_head(bytes, kHeaderLimit, head, framing));
    CHECK(head.size() == 0);
  }
  // A plain header not yet whole, cut anywhere: never read, head left clear.
  std::string const whole = plain.front();
  for (std::size_t cut = 0; cut < whole.find("\r\n\r\n") + 4; ++cut) {
    AnswerFraming framing;
    CHECK_FALSE(read_plain_answer_head(std::string_view(whole).substr(0, cut), kHeaderLimit, head, framing));
    CHECK(head.size() == 0);
  }
  // The limit: a header of header_limit bytes or more is left to Beast's
  // parser (which applies the limit to the status line and to the fields
  // apart, so it may still read it).
  AnswerFraming framing;
  auto const size = whole.find("\r\n\r\n") + 4;
  CHECK(read_plain_answer_head(whole, size + 1, head, framing));
  CHECK(framing.header_size == size);
  CHECK_FALSE(read_plain_answer_head(whole, size, head, framing));
}

TEST_CASE("answer head: folded values are copied, plain ones are views of the input") {
  std::string const bytes =
      "HTTP/1.1 200 OK\r\nX-Plain: abc\r\nX-Folded: a\r\n b\r\nX-Second: c\r\n\tdd\r\nContent-Length: 0\r\n\r\n";
  AnswerHead head;
  AnswerParser p(head);
  boost::beast::error_code ec;
  auto const n = put(p, bytes, ec);
  REQUIRE_FALSE(ec);
  CHECK(n == bytes.size());
  REQUIRE(head.size() == 4);
  auto it = head.begin();
  CHECK(it->value() == "abc");
  CHECK(it->value().data() >= bytes.data());
  CHECK(it->value().data() < bytes.data() + bytes.size());
  // Beast's own reading of the folded values.
  http::response_parser<http::string_body> beast;
  beast.put(asio::buffer(bytes.data(), bytes.size()), ec);
  REQUIRE_FALSE(ec);
  std::string const folded(beast.get()["X-Folded"]), second(beast.get()["X-Second"]);
  CHECK(folded.find('b') != std::string::npos);
  ++it;
  CHECK(it->name_string() == "X-Folded");
  CHECK(it->value() == folded);
  CHECK((it->value().data() < bytes.data() || it->value().data() >= bytes.data() + bytes.size()));
  ++it;
  CHECK(it->value() == second);
  CHECK(std::prev(it)->value() == folded);  // the second copy left the first one's view whole
  CHECK(head.status == 200);
  CHECK(head.reason == "OK");
}

TEST_CASE("answer head: the parser reads a header only") {
  std::string const bytes = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
  AnswerHead head;
  AnswerParser p(head);
  boost::beast::error_code ec;
  auto const n = put(p, bytes, ec);
  REQUIRE_FALSE(ec);
  CHECK(n == bytes.size() - 3);
  CHECK_FALSE(p.is_done());
  // Asked for the body, it refuses rather than dropping bytes.
  p.put(asio::buffer(bytes.data() + n, 3), ec);
  CHECK(ec == http::error::unexpected_body);
}
