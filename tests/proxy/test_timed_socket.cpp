// TimedSocket over real loopback TCP: a deadline passed with an operation
// pending (or before it begins) closes the socket and completes the operation
// as beast::error::timeout; a deadline moved later or cleared while the timer
// waits does not; a socket destroyed with operations pending frees everything
// (ASan checks that).
#include "proxy/timed_socket.hpp"
#include "ledger/executor.hpp"
#include "timed_pair.hpp"

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>

#include <array>
#include <chrono>
#include <optional>
#include <vector>

using idemgate::TcpSocket;
using idemgate::TcpAcceptor;
using idemgate::SteadyTimer;

namespace asio = boost::asio;
using asio::ip::tcp;
using idemgate::proxy::TimedSocket;
using idemgate::test::Pair;
using idemgate::test::run_until;
using namespace std::chrono_literals;

namespace {

struct Result {
  std::optional<boost::system::error_code> ec;
  std::size_t n = 0;
};

void read_into(TimedSocket& s, std::array<char, 16>& buf, Result& r) {
  s.async_read_some(asio::buffer(buf), [&r](boost::system::error_code ec, std::size_t n) {
    r.ec = ec;
    r.n = n;
  });
}

}  // namespace

TEST_CASE("timed socket: a read past its deadline completes as a timeout and closes the socket") {
  Pair p;
  std::array<char, 16> buf{};
  Result r;
  p.ours.expires_after(30ms);
  read_into(p.ours, buf, r);
  p.run_until([&] { return r.ec.has_value(); });
  REQUIRE(r.ec.has_value());
  CHECK(*r.ec == boost::beast::error::timeout);
  CHECK_FALSE(p.ours.socket().is_open());
  // The stream is dead afterwards, as beast::tcp_stream's is.
  Result again;
  read_into(p.ours, buf, again);
  p.run_until([&] { return again.ec.has_value(); });
  REQUIRE(again.ec.has_value());
  CHECK_MESSAGE(*again.ec == boost::beast::error::timeout, again.ec->message());
}

TEST_CASE("timed socket: data before the deadline completes the read") {
  Pair p;
  std::array<char, 16> buf{};
  Result r;
  p.ours.expires_after(10s);
  asio::write(p.peer, asio::buffer("hello", 5));
  read_into(p.ours, buf, r);
  p.run_until([&] { return r.ec.has_value(); });
  CHECK(r.ec == boost::system::error_code{});
  CHECK(r.n == 5);
  CHECK(p.ours.socket().is_open());
}

TEST_CASE("timed socket: a deadline moved later while the timer waits does not time out") {
  Pair p;
  std::array<char, 16> buf{};
  Result r;
  SteadyTimer stimulus(p.ioc);
  p.ours.expires_after(20ms);  // the timer is armed for 20 ms when the read begins
  read_into(p.ours, buf, r);
  p.ours.expires_after(30s);   // it wakes at 20 ms, finds the deadline later and waits again
  p.peer_writes_after(200ms, stimulus);
  p.run_until([&] { return r.ec.has_value(); });
  CHECK(r.ec == boost::system::error_code{});
  CHECK(r.n == 1);
}

TEST_CASE("timed socket: a deadline cleared while the timer waits does not time out") {
  Pair p;
  std::array<char, 16> buf{};
  Result r;
  SteadyTimer stimulus(p.ioc);
  p.ours.expires_after(20ms);
  read_into(p.ours, buf, r);
  p.ours.expires_never();
  p.peer_writes_after(200ms, stimulus);
  p.run_until([&] { return r.ec.has_value(); });
  CHECK(r.ec == boost::system::error_code{});
}

TEST_CASE("timed socket: a deadline moved earlier while a read is pending times it out") {
  Pair p;
  std::array<char, 16> buf{};
  Result r;
  p.ours.expires_after(30s);
  read_into(p.ours, buf, r);
  auto const start = std::chrono::steady_clock::now();
  p.ours.expires_after(30ms);
  p.run_until([&] { return r.ec.has_value(); });
  REQUIRE(r.ec.has_value());
  CHECK(*r.ec == boost::beast::error::timeout);
  CHECK(std::chrono::steady_clock::now() - start < 20s);  // the 30 ms deadline, not the 30 s one
}

TEST_CASE("timed socket: an operation begun after its deadline passed times out") {
  Pair p;
  std::array<char, 16> buf{};
  Result r;
  p.ours.expires_after(1ms);
  SteadyTimer later(p.ioc, 30ms);
  bool began = false;
  later.async_wait([&](boost::system::error_code) {
    began = true;
    read_into(p.ours, buf, r);
  });
  asio::write(p.peer, asio::buffer("x", 1));  // data is there: the deadline still wins
  p.run_until([&] { return r.ec.has_value(); });
  REQUIRE(began);
  CHECK(r.ec == boost::beast::error::timeout);
}

TEST_CASE("timed socket: a write the peer never reads times out") {
  Pair p;
  std::vector<char> chunk(64 << 20, 'x');  // far more than loopback's socket buffers hold
  std::optional<boost::system::error_code> ec;
  p.ours.expires_after(200ms);
  asio::async_write(p.ours, asio::buffer(chunk), [&](boost::system::error_code e, std::size_t) { ec = e; });
  p.run_until([&] { return ec.has_value(); });
  REQUIRE(ec.has_value());
  CHECK(*ec == boost::beast::error::timeout);
}

TEST_CASE("timed socket: reads and a write pending together all time out") {
  Pair p;
  std::array<char, 16> buf{};
  Result r;
  std::vector<char> chunk(64 << 20, 'x');
  std::optional<boost::system::error_code> wec;
  p.ours.expires_after(100ms);
  read_into(p.ours, buf, r);
  asio::async_write(p.ours, asio::buffer(chunk), [&](boost::system::error_code e, std::size_t) { wec = e; });
  p.run_until([&] { return r.ec.has_value() && wec.has_value(); });
  CHECK(r.ec == boost::beast::error::timeout);
  CHECK(wec == boost::beast::error::timeout);
}

TEST_CASE("timed socket: destroyed with a read and its timer pending, it completes the read as aborted") {
  asio::io_context ioc;
  TcpAcceptor acceptor(ioc, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  TcpSocket peer(ioc);
  std::array<char, 16> buf{};
  Result r;
  {
    TimedSocket ours(ioc.get_executor());
    ours.socket().connect(acceptor.local_endpoint());
    acceptor.accept(peer);
    ours.expires_after(30s);
    read_into(ours, buf, r);
  }
  run_until(ioc, [&] { return r.ec.has_value(); });
  REQUIRE(r.ec.has_value());
  CHECK(*r.ec == asio::error::operation_aborted);
  // No timer left behind: with its 30 s wait still pending, run_for would
  // take all of its 5 s.
  auto const start = std::chrono::steady_clock::now();
  ioc.restart();
  ioc.run_for(5s);
  CHECK(std::chrono::steady_clock::now() - start < 4s);
}

TEST_CASE("timed socket: connect to a listening port completes within the deadline") {
  asio::io_context ioc;
  TcpAcceptor acceptor(ioc, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  TimedSocket ours(ioc.get_executor());
  std::optional<boost::system::error_code> ec;
  tcp::endpoint got;
  std::vector<tcp::endpoint> endpoints{acceptor.local_endpoint()};
  ours.expires_after(10s);
  ours.async_connect(endpoints, [&](boost::system::error_code e, tcp::endpoint ep) {
    ec = e;
    got = ep;
  });
  run_until(ioc, [&] { return ec.has_value(); });
  CHECK(ec == boost::system::error_code{});
  CHECK(got == acceptor.local_endpoint());
}

TEST_CASE("timed socket: the coarse clock is steady_clock's, a few milliseconds behind at most") {
  for (int i = 0; i < 100; ++i) {
    auto const before = std::chrono::steady_clock::now();
    auto const coarse = TimedSocket::coarse_now();
    auto const after = std::chrono::steady_clock::now();
    CHECK(coarse <= after);
    CHECK(before - coarse < 50ms);  // a jiffy is 1 to 10 ms; 50 allows for a descheduled thread
  }
}

TEST_CASE("timed socket: waiting for readability times out, and a cancel (drain) ends it at once") {
  Pair p;
  std::optional<boost::system::error_code> ec;
  p.ours.expires_after(30ms);
  p.ours.async_wait_readable([&](boost::system::error_code e) { ec = e; });
  p.run_until([&] { return ec.has_value(); });
  CHECK(ec == boost::beast::error::timeout);

  Pair q;
  ec.reset();
  q.ours.expires_after(30s);
  q.ours.async_wait_readable([&](boost::system::error_code e) { ec = e; });
  q.ours.socket().cancel();
  q.run_until([&] { return ec.has_value(); });
  CHECK(ec == asio::error::operation_aborted);
  CHECK(q.ours.socket().is_open());
}

TEST_CASE("timed socket: a connect begun after its deadline fails, and does not connect") {
  asio::io_context ioc;
  TcpAcceptor acceptor(ioc, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  TimedSocket ours(ioc.get_executor());
  std::optional<boost::system::error_code> ec;
  std::vector<tcp::endpoint> endpoints{acceptor.local_endpoint()};
  ours.expires_after(1ms);
  SteadyTimer later(ioc, 30ms);
  later.async_wait([&](boost::system::error_code) {
    ours.async_connect(endpoints, [&](boost::system::error_code e, tcp::endpoint) { ec = e; });
  });
  run_until(ioc, [&] { return ec.has_value(); });
  CHECK(ec == boost::beast::error::timeout);
  CHECK_FALSE(ours.socket().is_open());
}
