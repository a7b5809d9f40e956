// WholeWrite (proxy/whole_write.hpp) over real loopback TCP: what it says was
// written is what left, because the guarded path decides from that count
// whether a request may have reached the provider ("nothing written on a
// fresh connection: the request never left").
#include "proxy/whole_write.hpp"
#include "ledger/executor.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>

#include <chrono>
#include <optional>
#include <thread>
#include <string>

using idemgate::Task;
using idemgate::TcpSocket;
using idemgate::TcpAcceptor;

namespace asio = boost::asio;
using asio::ip::tcp;
using idemgate::proxy::ProxyStream;
using idemgate::proxy::WholeWrite;
using namespace std::chrono_literals;

namespace {

// Our end as the proxy holds it (a ProxyStream) and the peer's socket.
struct Pair {
  asio::io_context ioc;
  TcpSocket peer{ioc};
  std::optional<ProxyStream> ours;

  // small: buffers of a few KiB on both sides, set before the connection
  // exists (a receive buffer shrunk later stalls the sender on loopback).
  explicit Pair(bool small = false) {
    TcpAcceptor acceptor(ioc, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    TcpSocket s(ioc);
    s.open(tcp::v4());
    if (small) {
      acceptor.set_option(asio::socket_base::receive_buffer_size(4096));
      s.set_option(asio::socket_base::send_buffer_size(4096));
    }
    s.connect(acceptor.local_endpoint());
    acceptor.accept(peer);
    ours.emplace(std::move(s));
  }
};

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 26);
  return s;
}

}  // namespace

TEST_CASE("WholeWrite: a small message leaves at once, whole") {
  Pair p;
  std::string const head = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
  WholeWrite w(*p.ours, head, asio::buffer("hello", 5));
  CHECK(!w.ec);
  CHECK(w.done);
  CHECK(w.written == head.size() + 5);
  std::string got(head.size() + 5, '\0');
  asio::read(p.peer, asio::buffer(got));
  CHECK(got == head + "hello");
}

TEST_CASE("WholeWrite: more than the socket takes: the rest is awaited and the counts add up") {
  Pair p(true);  // the first write cannot take it all
  std::string const head = "POST /x HTTP/1.1\r\nContent-Length: 2097152\r\n\r\n";
  std::string const body = pattern(2 << 20);
  WholeWrite w(*p.ours, head, asio::buffer(body));
  CHECK(!w.ec);
  REQUIRE(!w.done);
  CHECK(w.written > 0);
  CHECK(w.written < head.size() + body.size());

  std::size_t rest = 0;
  bool finished = false;
  boost::system::error_code rest_ec;
  asio::co_spawn(
      p.ioc,
      [&]() -> Task<void> {
        auto [ec, n] = co_await w.write_rest(*p.ours, 10s);
        rest_ec = ec;
        rest = n;
        finished = true;
      },
      asio::detached);
  // The peer reads on a thread of its own, blocking, as a client would.
  std::string got(head.size() + body.size(), '\0');
  boost::system::error_code read_ec;
  std::thread reader([&] { asio::read(p.peer, asio::buffer(got), read_ec); });
  auto const guard = std::chrono::steady_clock::now() + 20s;
  while (!finished && std::chrono::steady_clock::now() < guard) {
    p.ioc.restart();
    p.ioc.run_for(10ms);
  }
  reader.join();
  CHECK_MESSAGE(!read_ec, read_ec.message());
  REQUIRE(finished);
  CHECK_MESSAGE(!rest_ec, rest_ec.message());
  CHECK(w.written + rest == head.size() + body.size());
  CHECK(got == head + body);  // in order, nothing twice
}

TEST_CASE("WholeWrite: a peer that reset the connection: an error and nothing counted as written") {
  Pair p;
  p.peer.set_option(asio::socket_base::linger(true, 0));
  p.peer.close();  // a reset, delivered at once on loopback
  // The reset is seen by the first send at the latest, the first or the
  // second message (the first may still be taken by the kernel).
  std::string const head = "GET / HTTP/1.1\r\n\r\n";
  WholeWrite first(*p.ours, head, asio::const_buffer{});
  if (!first.ec) {
    WholeWrite second(*p.ours, head, asio::const_buffer{});
    CHECK(second.ec);
    CHECK(second.done);
    CHECK(second.written == 0);
  } else {
    CHECK(first.done);
    CHECK(first.written == 0);
  }
}

