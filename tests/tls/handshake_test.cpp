// Real TLS over loopback TCP (port 0): an Asio server presenting a minted
// leaf, an Asio client built from make_client_context with the CA as
// tls.upstream_ca_file, and the real curl.
#include "test_support.hpp"

#include "tls/client_context.hpp"
#include "tls/leaf_minter.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <thread>

using namespace idemgate::tls;
using idemgate::tls::test::TestCa;
namespace asio = boost::asio;
namespace ssl = asio::ssl;
using asio::ip::tcp;

namespace {

constexpr auto as_result = asio::as_tuple(asio::use_awaitable);
// A guard against a hung test, not a wait: run_for returns as soon as the
// work is done.
constexpr std::chrono::seconds test_deadline{20};

struct Handshake {
  boost::system::error_code server_ec;
  boost::system::error_code client_ec;
  std::string reason;       // describe_handshake_error on the client side
  std::string alpn;         // what the client saw selected
  std::string server_sni;   // what the server saw
  bool server_done = false;
  bool client_done = false;
};

std::string alpn_selected(SSL* ssl) {
  const unsigned char* data = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl, &data, &len);
  return std::string(reinterpret_cast<const char*>(data), len);
}

asio::awaitable<void> serve_once(tcp::acceptor& acceptor, ssl::context& context, Handshake& out) {
  auto [ec, socket] = co_await acceptor.async_accept(as_result);
  if (!ec) {
    ssl::stream<tcp::socket> stream(std::move(socket), context);
    std::tie(ec) = co_await stream.async_handshake(ssl::stream_base::server, as_result);
    if (const char* sni = SSL_get_servername(stream.native_handle(), TLSEXT_NAMETYPE_host_name))
      out.server_sni = sni;
  }
  out.server_ec = ec;
  out.server_done = true;
}

asio::awaitable<void> connect_once(tcp::endpoint to, ssl::context& context, std::string name,
                                   std::string offer_alpn, Handshake& out) {
  ssl::stream<tcp::socket> stream(co_await asio::this_coro::executor, context);
  auto [ec] = co_await stream.next_layer().async_connect(to, as_result);
  if (!ec) ec = prepare_client_stream(stream, name);
  if (!ec && !offer_alpn.empty())
    SSL_set_alpn_protos(stream.native_handle(),
                        reinterpret_cast<const unsigned char*>(offer_alpn.data()),
                        static_cast<unsigned>(offer_alpn.size()));
  if (!ec) std::tie(ec) = co_await stream.async_handshake(ssl::stream_base::client, as_result);
  out.client_ec = ec;
  if (ec) out.reason = describe_handshake_error(ec, stream);
  else out.alpn = alpn_selected(stream.native_handle());
  out.client_done = true;
}

// One handshake between a server using `server` and a client verifying
// `name`, both on loopback.
Handshake handshake(ssl::context& server, ssl::context& client, const std::string& name,
                    const std::string& offer_alpn = {}) {
  asio::io_context ioc;
  tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  Handshake out;
  auto rethrow = [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  };
  asio::co_spawn(ioc, serve_once(acceptor, server, out), rethrow);
  asio::co_spawn(ioc, connect_once(acceptor.local_endpoint(), client, name, offer_alpn, out),
                 rethrow);
  ioc.run_for(test_deadline);
  REQUIRE(out.server_done);
  REQUIRE(out.client_done);
  return out;
}

struct Fixture {
  TestCa ca;
  ClientContextPtr client;

  Fixture() {
    auto made = make_client_context(ca.files.cert.string());
    REQUIRE_MESSAGE(made.ok(), made.error);
    client = made.value;
  }
  ServerContextPtr leaf(std::string_view host) {
    auto minted = mint_server_context(*ca.ca, host);
    REQUIRE_MESSAGE(minted.ok(), minted.error);
    return minted.value;
  }
};

}  // namespace

TEST_CASE("a client trusting the CA completes a handshake with a minted leaf and gets ALPN http/1.1") {
  Fixture f;
  auto result = handshake(*f.leaf("localhost"), *f.client, "localhost");
  CHECK_MESSAGE(!result.client_ec, result.reason);
  CHECK(!result.server_ec);
  CHECK(result.alpn == "http/1.1");
  CHECK(result.server_sni == "localhost");
}

TEST_CASE("the server picks http/1.1 when the client offers h2 first") {
  Fixture f;
  auto result = handshake(*f.leaf("localhost"), *f.client, "localhost",
                          std::string("\x02h2\x08http/1.1", 12));
  CHECK_MESSAGE(!result.client_ec, result.reason);
  CHECK(result.alpn == "http/1.1");
}

TEST_CASE("a client offering only h2 still connects, without ALPN") {
  Fixture f;
  auto result = handshake(*f.leaf("localhost"), *f.client, "localhost", std::string("\x02h2", 3));
  CHECK_MESSAGE(!result.client_ec, result.reason);
  CHECK(result.alpn.empty());
}

TEST_CASE("a certificate for another name fails the handshake with a readable reason") {
  Fixture f;
  auto result = handshake(*f.leaf("localhost"), *f.client, "wrong.example.com");
  MESSAGE("reason: ", result.reason);
  CHECK(result.client_ec);
  CHECK(result.server_ec);
  CHECK(result.reason.find("hostname mismatch") != std::string::npos);
  CHECK(result.reason.find("wanted wrong.example.com") != std::string::npos);
  CHECK(result.reason.find("DNS:localhost") != std::string::npos);
}

TEST_CASE("IP literals: verified against the IP SAN, no SNI sent") {
  Fixture f;
  auto good = handshake(*f.leaf("127.0.0.1"), *f.client, "127.0.0.1");
  CHECK_MESSAGE(!good.client_ec, good.reason);
  CHECK(good.server_sni.empty());

  auto wrong = handshake(*f.leaf("127.0.0.2"), *f.client, "127.0.0.1");
  MESSAGE("reason: ", wrong.reason);
  CHECK(wrong.client_ec);
  CHECK(wrong.reason.find("IP address mismatch") != std::string::npos);
  CHECK(wrong.reason.find("wanted 127.0.0.1") != std::string::npos);
  CHECK(wrong.reason.find("IP:127.0.0.2") != std::string::npos);

  // A DNS-name leaf does not satisfy an IP literal.
  auto dns_leaf = handshake(*f.leaf("localhost"), *f.client, "127.0.0.1");
  CHECK(dns_leaf.client_ec);
}

TEST_CASE("without the CA as upstream_ca_file the system store rejects the leaf") {
  Fixture f;
  auto system_only = make_client_context("");
  REQUIRE(system_only.ok());
  auto result = handshake(*f.leaf("localhost"), *system_only.value, "localhost");
  CHECK(result.client_ec);
  // The server sends the CA along, so OpenSSL reports the untrusted root.
  CHECK_MESSAGE(result.reason.find("certificate verification failed: self-signed certificate in "
                                   "certificate chain") != std::string::npos,
                result.reason);
}

TEST_CASE("a TLS 1.1-only client is refused by a minted leaf's context") {
  Fixture f;
  ssl::context old(ssl::context::tls_client);
  SSL_CTX_set_max_proto_version(old.native_handle(), TLS1_1_VERSION);
  SSL_CTX_set_security_level(old.native_handle(), 0);
  auto result = handshake(*f.leaf("localhost"), old, "localhost");
  MESSAGE("reason: ", result.reason);
  CHECK(result.server_ec);
  CHECK(result.client_ec);
  CHECK(result.reason.find("TLS handshake failed") != std::string::npos);
}

TEST_CASE("make_client_context names a bad upstream_ca_file") {
  auto made = make_client_context("/nonexistent/upstream-ca.pem");
  CHECK_FALSE(made.ok());
  CHECK(made.error.find("/nonexistent/upstream-ca.pem") != std::string::npos);
}

TEST_CASE("curl --cacert trusts a minted leaf") {
  Fixture f;
  auto leaf = f.leaf("leaf.test");
  asio::io_context ioc;
  tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const auto port = acceptor.local_endpoint().port();
  std::string request_line;

  // Answers one HTTPS request with "ok".
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto [ec, socket] = co_await acceptor.async_accept(as_result);
        if (ec) co_return;
        ssl::stream<tcp::socket> stream(std::move(socket), *leaf);
        std::tie(ec) = co_await stream.async_handshake(ssl::stream_base::server, as_result);
        if (ec) co_return;
        asio::streambuf request;
        auto [rec, n] = co_await asio::async_read_until(stream, request, "\r\n\r\n", as_result);
        if (rec) co_return;
        request_line.assign(asio::buffers_begin(request.data()),
                            asio::buffers_begin(request.data()) + static_cast<long>(n));
        request_line = request_line.substr(0, request_line.find("\r\n"));
        static const std::string answer =
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        co_await asio::async_write(stream, asio::buffer(answer), as_result);
        co_await stream.async_shutdown(as_result);
      },
      [](std::exception_ptr) {});
  std::thread server([&] { ioc.run_for(test_deadline); });

  const std::string url = "https://leaf.test:" + std::to_string(port) + "/hello";
  const std::string command = "curl -sS --max-time 15 --cacert '" + f.ca.files.cert.string() +
                              "' --resolve leaf.test:" + std::to_string(port) + ":127.0.0.1 " +
                              url + " 2>&1";
  std::string output;
  int status = -1;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buf[512];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
    status = ::pclose(pipe);
  }
  ioc.stop();
  server.join();
  CHECK_MESSAGE(status == 0, output);
  CHECK(output == "ok");
  CHECK(request_line == "GET /hello HTTP/1.1");
}
