// Sans-I/O checks of the proxy's HTTP/1.1 rules.
#include "proxy/http_rules.hpp"

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <doctest/doctest.h>

#include <random>
#include <sstream>

using namespace idemgate::proxy;
namespace http = boost::beast::http;

TEST_CASE("raw header: a complete, clean header is accepted with its size") {
  std::string const h = "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\nBODY";
  auto r = check_raw_header(h, 8192);
  CHECK(r.error == RawHeaderError::none);
  CHECK(r.header_size == h.size() - 4);
}

TEST_CASE("raw header: incomplete until CRLFCRLF") {
  CHECK(check_raw_header("GET http://a/ HTTP/1.1\r\nHost: a\r\n", 8192).error == RawHeaderError::incomplete);
}

TEST_CASE("raw header: obs-fold, bare LF and NUL are refused") {
  CHECK(check_raw_header("GET http://a/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 8192).error == RawHeaderError::obs_fold);
  CHECK(check_raw_header("GET http://a/ HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n", 8192).error == RawHeaderError::obs_fold);
  CHECK(check_raw_header("GET http://a/ HTTP/1.1\nHost: a\r\n\r\n", 8192).error == RawHeaderError::bare_lf);
  CHECK(check_raw_header(std::string("GET http://a/ HTTP/1.1\r\nX: \0\r\n\r\n", 30), 8192).error ==
        RawHeaderError::nul_byte);
}

TEST_CASE("raw header: request line limit, even before the header is complete") {
  std::string line = "GET http://a/" + std::string(100, 'x') + " HTTP/1.1";
  CHECK(check_raw_header(line, 50).error == RawHeaderError::request_line_too_long);
  CHECK(check_raw_header(line + "\r\n\r\n", 200).error == RawHeaderError::none);
}

TEST_CASE("raw header: leading empty lines are tolerated") {
  auto r = check_raw_header("\r\n\r\nGET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 8192);
  CHECK(r.error == RawHeaderError::none);
}

namespace {

// check_raw_header's rules one byte at a time, as they read.
RawHeaderCheck raw_header_by_bytes(std::string_view bytes, std::size_t request_line_limit) {
  RawHeaderCheck out;
  std::size_t pos = 0;
  while (pos + 1 < bytes.size() && bytes[pos] == '\r' && bytes[pos + 1] == '\n') pos += 2;
  auto const line_end = bytes.find("\r\n", pos);
  if ((line_end == std::string_view::npos ? bytes.size() : line_end) - pos > request_line_limit) {
    out.error = RawHeaderError::request_line_too_long;
    return out;
  }
  auto const end = bytes.find("\r\n\r\n", pos);
  std::string_view const scan = end == std::string_view::npos ? bytes : bytes.substr(0, end + 4);
  for (std::size_t i = pos; i < scan.size(); ++i) {
    if (scan[i] == '\0') {
      out.error = RawHeaderError::nul_byte;
      return out;
    }
    if (scan[i] != '\n') continue;
    if (i == 0 || scan[i - 1] != '\r') {
      out.error = RawHeaderError::bare_lf;
      return out;
    }
    if (i + 1 < scan.size() && (scan[i + 1] == ' ' || scan[i + 1] == '\t')) {
      out.error = RawHeaderError::obs_fold;
      return out;
    }
  }
  if (end == std::string_view::npos) return out;
  out.error = RawHeaderError::none;
  out.header_size = end + 4;
  return out;
}

}  // namespace

TEST_CASE("raw header: the checks agree with a byte-by-byte reading on random heads") {
  std::mt19937 rng(1205);
  constexpr std::string_view alphabet("\r\n\r\n \t\0aB:", 11);
  for (int i = 0; i < 50000; ++i) {
    std::string head;
    for (int n = std::uniform_int_distribution<int>(0, 40)(rng); n > 0; --n)
      head += alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)];
    auto const fast = check_raw_header(head, 12);
    auto const slow = raw_header_by_bytes(head, 12);
    INFO("head: ", doctest::toString(head));
    REQUIRE(fast.error == slow.error);
    REQUIRE(fast.header_size == slow.header_size);
  }
}

TEST_CASE("absolute-form targets") {
  auto t = parse_absolute_target("http://Example.COM:8080/a/b?x=1&y=2");
  REQUIRE(t);
  CHECK(t->host == "example.com");
  CHECK(t->port == 8080);
  CHECK(t->origin_form == "/a/b?x=1&y=2");
  CHECK(t->authority() == "example.com:8080");
  CHECK(t->url() == "http://example.com:8080/a/b?x=1&y=2");
  auto d = parse_absolute_target("http://example.com");
  REQUIRE(d);
  CHECK(d->port == 80);
  CHECK(d->origin_form == "/");
  CHECK(d->authority() == "example.com");
  CHECK(d->url() == "http://example.com/");
  auto s = parse_absolute_target("https://example.com:443/p");
  REQUIRE(s);
  CHECK(s->url() == "https://example.com/p");
  auto v6 = parse_absolute_target("http://[::1]:9/x");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->host_is_ip);
  CHECK(v6->authority() == "[::1]:9");
  CHECK(v6->url() == "http://[::1]:9/x");
  CHECK_FALSE(parse_absolute_target("/relative"));
  CHECK_FALSE(parse_absolute_target("ftp://a/"));
  CHECK_FALSE(parse_absolute_target("http://user:pw@a/"));
  CHECK_FALSE(parse_absolute_target("http://a:99999/"));
}

TEST_CASE("hosts are normalised as matching reads them: case, trailing dot, escapes") {
  auto t = parse_absolute_target("http://API.%73tripe.COM.:8080/v1/charges");
  REQUIRE(t);
  CHECK(t->host == "api.stripe.com");
  CHECK_FALSE(t->host_is_ip);
  CHECK_FALSE(parse_absolute_target("http://api%2Fstripe.com/"));
  // Boost.URL reads these as an IPv4 host and a path without '/'.
  CHECK_FALSE(parse_absolute_target("http://127.0.0.1.:80/x"));
  CHECK_FALSE(parse_absolute_target("http://127.0.0.1.evil.example/x"));
  auto c = parse_authority_target("API.Stripe.com.:443");
  REQUIRE(c);
  CHECK(c->host == "api.stripe.com");
  auto ip = parse_authority_target("127.0.0.1.:443");
  REQUIRE(ip);
  CHECK(ip->host == "127.0.0.1");
  CHECK(ip->host_is_ip);
}

namespace {

bool same_target(const Target& a, const Target& b) {
  return a.scheme == b.scheme && a.host == b.host && a.port == b.port && a.origin_form == b.origin_form &&
         a.host_is_ip == b.host_is_ip;
}

// Random targets built from the pieces that make URL parsers disagree:
// scheme spellings, dotted quads near their limits, case, escapes, ports of
// every length, delimiters, bytes outside RFC 3986.
std::string random_target(std::mt19937& rng) {
  auto pick = [&](std::initializer_list<std::string_view> pieces) {
    auto it = pieces.begin();
    std::advance(it, std::uniform_int_distribution<std::size_t>(0, pieces.size() - 1)(rng));
    return std::string(*it);
  };
  auto count = [&](int most) { return std::uniform_int_distribution<int>(0, most)(rng); };
  // A third of them from pieces that are each valid in their place, so
  // that many parse; the rest with one piece in four of any kind, so that
  // many are valid but for one odd byte.
  bool const tame = count(2) == 0;
  auto wild = [&] { return !tame && count(3) == 0; };
  std::string s = !wild() ? pick({"http://", "https://"})
                          : pick({"http://", "https://", "HTTP://", "Http://", "http:/", "http:", "ftp://", "",
                                  "http:///", "https://:"});
  s += !wild() ? pick({"a", "example", "api", "1.2.3.4", "127.0.0.1", "10.0.0.255"})
               : pick({"", ".", "-", "00", "01", "256", "300", "A", "%41", "[::1]", "[v1.x]", "user:pw@", "_"});
  for (int i = count(4); i > 0; --i)
    s += !wild() ? pick({"a", "z", "example", ".", "-", "0", "1", "9", "25", "255", "256", "1.2.3.4", "127.0.0.1"})
                 : pick({"A", "Z", "%41", "%2e", "%2F", "%zz", "%4", "%00", "_", "~", "[::1]", "@", "\xc3\xa9", " ",
                         "\t", "\x7f", "*", "+", ".", "..", "00"});
  if (count(2) != 0)
    s += !wild() ? pick({":1", ":80", ":080", ":443", ":8080", ":65535"})
                 : pick({":", ":0", ":00080", ":65536", ":99999", ":123456", ":8a", "::", ":-1", ": 80"});
  for (int i = count(6); i > 0; --i)
    s += !wild() ? pick({"/", "/", "a", "Z", "..", ".", "?", "=", "&", "%20", "%2F", "%2f", ";", "~", "!", "$", "'",
                         "(", "*", "+", ",", ":", "@", "-", "_"})
                 : pick({"#", "%zz", "%", "%A", "%00", "[", "]", "{", "|", "\\", "^", "`", " ", "\"", "<", ">", "\x01",
                         "\x80", "\xff", "\r", "\n"});
  return s;
}

}  // namespace

TEST_CASE("absolute-form targets: the plain reader agrees with Boost.URL wherever it reads") {
  std::mt19937 rng(20261205);
  int read_plainly = 0, read_by_grammar = 0;
  constexpr int kCases = 100000;
  for (int i = 0; i < kCases; ++i) {
    std::string const text = random_target(rng);
    auto const grammar = detail::parse_absolute_target_by_grammar(text);
    if (grammar) ++read_by_grammar;
    auto const plain = detail::parse_plain_absolute_target(text);
    if (!plain) continue;
    ++read_plainly;
    INFO("target: ", text);
    REQUIRE(grammar);
    CHECK(same_target(*plain, *grammar));
  }
  // Both readers see a real share of valid targets, so the comparison means something.
  CHECK(read_plainly > kCases / 20);
  CHECK(read_by_grammar > read_plainly);
  // Spellings the plain reader leaves to the grammar, and the grammar's answer.
  for (std::string_view const text : {"http://1.2.3.4.evil/", "http://01.2.3.4/", "http://256.1.1.1/", "http://a.:80/",
                                      "http://A/", "http://a:/", "http://a#f", "http://a/%zz", "http://[::1]/",
                                      "http://.00/", "http://-a/"}) {
    INFO("target: ", text);
    CHECK_FALSE(detail::parse_plain_absolute_target(text));
    CHECK(bool(parse_absolute_target(text)) == bool(detail::parse_absolute_target_by_grammar(text)));
  }
  for (std::string_view const text : {"http://127.0.0.1:8080/", "http://api.stripe.com/v1/charges?limit=3&x=%2F",
                                      "https://a-b.example:443", "http://a?q"}) {
    INFO("target: ", text);
    auto const plain = detail::parse_plain_absolute_target(text);
    REQUIRE(plain);
    CHECK(same_target(*plain, *detail::parse_absolute_target_by_grammar(text)));
  }
}

TEST_CASE("authority-form CONNECT targets") {
  auto t = parse_authority_target("api.stripe.com:443");
  REQUIRE(t);
  CHECK(t->host == "api.stripe.com");
  CHECK(t->port == 443);
  CHECK_FALSE(t->host_is_ip);
  auto ip = parse_authority_target("127.0.0.1:8443");
  REQUIRE(ip);
  CHECK(ip->host_is_ip);
  auto v6 = parse_authority_target("[::1]:443");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK_FALSE(parse_authority_target("api.stripe.com"));
  CHECK_FALSE(parse_authority_target("a b:443"));
  CHECK_FALSE(parse_authority_target(":443"));
}

TEST_CASE("request Transfer-Encoding must be exactly chunked") {
  http::fields f;
  CHECK(acceptable_request_transfer_encoding(f));
  f.set(http::field::transfer_encoding, "chunked");
  CHECK(acceptable_request_transfer_encoding(f));
  f.set(http::field::transfer_encoding, "gzip, chunked");
  CHECK_FALSE(acceptable_request_transfer_encoding(f));
  f.set(http::field::transfer_encoding, "identity");
  CHECK_FALSE(acceptable_request_transfer_encoding(f));
}

TEST_CASE("hop-by-hop headers and the headers Connection names are removed") {
  http::fields f;
  f.set(http::field::connection, "keep-alive, X-Private");
  f.set("X-Private", "secret");
  f.set(http::field::proxy_authorization, "Basic abc");
  f.set(http::field::keep_alive, "timeout=5");
  f.set(http::field::te, "trailers");
  f.set(http::field::upgrade, "websocket");
  f.set("Idemgate-Run", "run-1");
  f.set("X-Kept", "1");
  strip_hop_by_hop(f, true);
  CHECK(f.count("X-Private") == 0);
  CHECK(f.count(http::field::proxy_authorization) == 0);
  CHECK(f.count(http::field::keep_alive) == 0);
  CHECK(f.count(http::field::te) == 0);
  CHECK(f.count(http::field::upgrade) == 0);
  CHECK(f.count(http::field::connection) == 0);
  CHECK(f.count("Idemgate-Run") == 0);
  CHECK(f["X-Kept"] == "1");
}

TEST_CASE("hop-by-hop: every Connection header's names, any case, and repeated fields go") {
  http::fields f;
  f.insert(http::field::connection, "x-a");
  f.insert(http::field::connection, "X-B");
  f.insert("X-A", "1");
  f.insert("x-b", "2");
  f.insert("x-b", "3");
  f.insert(http::field::transfer_encoding, "chunked");
  f.insert("Idemgate-Key", "k");
  f.insert("X-Kept", "1");
  strip_hop_by_hop(f, false);
  CHECK(f.count("X-A") == 0);
  CHECK(f.count("X-B") == 0);
  CHECK(f.count(http::field::transfer_encoding) == 0);
  CHECK(f["Idemgate-Key"] == "k");  // kept unless strip_idemgate
  CHECK(f["X-Kept"] == "1");
}

TEST_CASE("hop-by-hop: each element's leading name goes, however the rest of the element is spelled") {
  http::fields f;
  f.insert(http::field::connection, "x-a x-b, x-c;q=1,, \t x-d , \"x-e\", x-f/2");
  f.insert(http::field::proxy_connection, "X-G");
  for (auto const name : {"X-A", "X-C", "X-D", "X-F", "X-G", "X-Kept", "X-B", "X-E"}) f.insert(name, "1");
  strip_hop_by_hop(f, false);
  for (auto const gone : {"X-A", "X-C", "X-D", "X-F", "X-G"}) {
    CAPTURE(gone);
    CHECK(f.count(gone) == 0);
  }
  CHECK(f.count(http::field::connection) == 0);
  CHECK(f.count(http::field::proxy_connection) == 0);
  CHECK(f["X-Kept"] == "1");
}

namespace {
// What Beast's own serializer writes for m's header.
template <bool isRequest>
std::string beast_head(http::message<isRequest, http::string_body>& m) {
  std::ostringstream out;
  http::serializer<isRequest, http::string_body> sr{m};
  sr.split(true);
  boost::beast::error_code ec;
  while (!sr.is_header_done()) {
    sr.next(ec, [&](boost::beast::error_code&, auto const& buffers) {
      auto const s = boost::beast::buffers_to_string(buffers);
      out << s;
      sr.consume(s.size());
    });
  }
  return out.str();
}
}  // namespace

TEST_CASE("render_head writes the header byte for byte as Beast's serializer") {
  http::request<http::string_body> req{http::verb::get, "/a/b?c=d", 11};
  req.set(http::field::host, "127.0.0.1:8080");
  req.set("X-Custom", "v a l");
  req.insert("X-Custom", "second");
  std::string head;
  render_head(req, head);
  CHECK(head == beast_head(req));
  CHECK(head.starts_with("GET /a/b?c=d HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"));

  http::request<http::string_body> odd{http::verb::unknown, "/", 10};
  odd.method_string("PURGE");
  render_head(odd, head);
  CHECK(head == beast_head(odd));
  CHECK(head == "PURGE / HTTP/1.0\r\n\r\n");

  http::response<http::string_body> res{http::status::created, 11};
  res.set(http::field::content_length, "2");
  res.set(http::field::via, "1.1 idemgate");
  render_head(res, head);
  CHECK(head == beast_head(res));
  CHECK(head == "HTTP/1.1 201 Created\r\nContent-Length: 2\r\nVia: 1.1 idemgate\r\n\r\n");

  res.result(299);  // no standard reason
  res.reason("Fine");
  render_head(res, head);
  CHECK(head == beast_head(res));
  res.reason("");
  res.version(10);
  render_head(res, head);
  CHECK(head == beast_head(res));
}

TEST_CASE("Via gets this hop appended") {
  http::fields f;
  add_via(f, 11);
  CHECK(f[http::field::via] == "1.1 idemgate");
  add_via(f, 10);
  CHECK(f[http::field::via] == "1.1 idemgate, 1.0 idemgate");
  http::fields empty;
  empty.insert(http::field::via, "");
  add_via(empty, 11);
  CHECK(empty[http::field::via] == "1.1 idemgate");
  CHECK(empty.count(http::field::via) == 1);
}

TEST_CASE("gateway route: prefix replaced by the upstream base, query kept") {
  auto t = route_target("/stripe/", "https://api.stripe.com/", "/stripe/v1/charges?expand=x");
  REQUIRE(t);
  CHECK(t->scheme == "https");
  CHECK(t->host == "api.stripe.com");
  CHECK(t->port == 443);
  CHECK(t->origin_form == "/v1/charges?expand=x");
  CHECK(t->authority() == "api.stripe.com");
}

TEST_CASE("gateway route: a base path and a port are kept, slashes joined once") {
  auto t = route_target("/gh/", "http://127.0.0.1:9000/api/v3/", "/gh/repos/a/b");
  REQUIRE(t);
  CHECK(t->scheme == "http");
  CHECK(t->port == 9000);
  CHECK(t->origin_form == "/api/v3/repos/a/b");
  auto root = route_target("/gh/", "http://h/base", "/gh/");
  REQUIRE(root);
  CHECK(root->origin_form == "/base/");
  auto slashes = route_target("/gh/", "http://h/", "/gh//x");
  REQUIRE(slashes);
  CHECK(slashes->origin_form == "/x");
}

TEST_CASE("gateway route: no match outside the prefix or in the query") {
  CHECK_FALSE(route_target("/stripe/", "https://api.stripe.com/", "/stripex/v1"));
  CHECK_FALSE(route_target("/stripe/", "https://api.stripe.com/", "/other?/stripe/"));
  CHECK_FALSE(route_target("/stripe/", "not a url", "/stripe/v1"));
}

TEST_CASE("Keep-Alive: the announced idle timeout, or nothing") {
  CHECK(keep_alive_timeout("timeout=5, max=100") == std::chrono::seconds(5));
  CHECK(keep_alive_timeout("max=100, Timeout = 30") == std::chrono::seconds(30));
  CHECK(keep_alive_timeout("timeout=\"2\"") == std::chrono::seconds(2));
  CHECK_FALSE(keep_alive_timeout(""));
  CHECK_FALSE(keep_alive_timeout("max=100"));
  CHECK_FALSE(keep_alive_timeout("timeout=0"));
  CHECK_FALSE(keep_alive_timeout("timeout=-1"));
  CHECK_FALSE(keep_alive_timeout("timeout=5s"));
  CHECK_FALSE(keep_alive_timeout("timeout=99999999999"));
}
