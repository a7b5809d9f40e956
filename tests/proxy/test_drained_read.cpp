// TimedSocket's reads over real loopback TCP, counted at the system call: a
// read that empties the socket lets the next one wait for epoll instead of
// trying a receive that would fail with EAGAIN; a read that fills its buffer
// lets the next try at once; bytes, an end of stream or a reset that arrive
// while no read waits are still read at once.
//
// Its own executable: it defines recv() and recvmsg(), which the process's
// every receive then goes through (the executable's definitions come before
// libc's), and counts those made on one descriptor.
#include "proxy/timed_socket.hpp"
#include "ledger/executor.hpp"
#include "timed_pair.hpp"

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace {

std::atomic<int> watched{-1};
std::atomic<int> receives{0};     // on the watched descriptor
std::atomic<int> would_block{0};  // of them, failed with EAGAIN

}  // namespace

namespace {

void count(int fd, ssize_t n, int error) {
  if (fd != watched.load()) return;
  ++receives;
  if (n < 0 && (error == EAGAIN || error == EWOULDBLOCK)) ++would_block;
}

}  // namespace

extern "C" ssize_t recv(int fd, void* data, size_t size, int flags) {
  auto const n = static_cast<ssize_t>(::syscall(SYS_recvfrom, fd, data, size, flags, nullptr, nullptr));
  int const saved = errno;
  count(fd, n, saved);
  errno = saved;
  return n;
}

extern "C" ssize_t recvmsg(int fd, struct msghdr* msg, int flags) {
  auto const n = static_cast<ssize_t>(::syscall(SYS_recvmsg, fd, msg, flags));
  int const saved = errno;
  count(fd, n, saved);
  errno = saved;
  return n;
}

namespace asio = boost::asio;
using idemgate::TcpSocket;
using idemgate::proxy::TimedSocket;
using idemgate::test::Pair;

namespace {

struct Read {
  std::optional<boost::system::error_code> ec;
  std::size_t n = 0;
};

template <std::size_t N>
void read_into(TimedSocket& s, std::array<char, N>& buf, Read& r) {
  r = Read{};
  s.async_read_some(asio::mutable_buffer(buf.data(), buf.size()), [&r](boost::system::error_code ec, std::size_t n) {
    r.ec = ec;
    r.n = n;
  });
}

void watch(TimedSocket& s) {
  watched = s.socket().native_handle();
  receives = 0;
  would_block = 0;
}

// Writes on ours as the proxy writes: through the TimedSocket.
void ours_writes(TimedSocket& s, std::string_view text) {
  boost::system::error_code ec;
  REQUIRE(s.write_some_now(asio::buffer(text), ec) == text.size());
  REQUIRE(!ec);
}

// Until ours holds n bytes (loopback may deliver them a moment after the
// peer's write returns), so that a receive counted next finds them.
void wait_for_bytes(TimedSocket& s, std::size_t n) {
  auto const guard = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (s.socket().available() < n && std::chrono::steady_clock::now() < guard) {
    pollfd pfd{s.socket().native_handle(), POLLIN, 0};
    ::poll(&pfd, 1, 10);
  }
  REQUIRE(s.socket().available() >= n);
}

// Runs the pair's context until the reactor has taken every event raised on
// `ours` so far, with no read waiting on it: the peer writes to a second
// connection, whose wait completes only after epoll has reported it, and
// loopback raises the events in the order the peer caused them.
void reactor_takes_pending_events(Pair& p) {
  TimedSocket sentinel{p.ioc.get_executor()};
  TcpSocket sentinel_peer{p.ioc};
  idemgate::test::connect_loopback(p.ioc, sentinel, sentinel_peer);
  Read r;
  sentinel.async_wait_readable([&](boost::system::error_code ec) { r.ec = ec; });
  asio::write(sentinel_peer, asio::buffer("s", 1));
  p.run_until([&] { return r.ec.has_value(); });
  REQUIRE(r.ec == boost::system::error_code{});
}

}  // namespace

TEST_CASE("drained read: a read that empties the socket spares the next one its failing receive") {
  Pair p;
  watch(p.ours);
  std::array<char, 64> buf{};
  std::array<char, 8> pong{};
  Read r;
  int const messages = 50;
  asio::write(p.peer, asio::buffer("ping", 4));
  wait_for_bytes(p.ours, 4);
  read_into(p.ours, buf, r);
  for (int i = 0; i < messages; ++i) {
    p.run_until([&] { return r.ec.has_value(); });
    REQUIRE(r.ec == boost::system::error_code{});
    REQUIRE(r.n == 4);
    if (i + 1 == messages) break;
    // Answered, then the next read begins before its message is written,
    // as a proxy's read of the next request or of an answer does.
    ours_writes(p.ours, "pong");
    read_into(p.ours, buf, r);
    asio::read(p.peer, asio::buffer(pong.data(), 4));
    asio::write(p.peer, asio::buffer("ping", 4));
  }
  // One receive a message: none tried before its bytes arrived. Asio's
  // default (a receive tried at once) fails one a message.
  CHECK(receives.load() == messages);
  CHECK(would_block.load() == 0);
}

TEST_CASE("drained read: a read that fills its buffer lets the next take the rest at once") {
  Pair p;
  watch(p.ours);
  std::array<char, 8> buf{};
  Read r;
  asio::write(p.peer, asio::buffer("0123456789abcdef01234", 21));
  wait_for_bytes(p.ours, 21);
  reactor_takes_pending_events(p);  // the bytes' one event, spent before the reads
  std::string got;
  for (std::size_t expected : {8u, 8u, 5u}) {
    // The socket already holds what is left and no new event comes: only a
    // receive tried at once finds it.
    read_into(p.ours, buf, r);
    p.run_until([&] { return r.ec.has_value(); });
    REQUIRE(r.ec == boost::system::error_code{});
    REQUIRE(r.n == expected);
    got.append(buf.data(), r.n);
  }
  CHECK(got == "0123456789abcdef01234");
  CHECK(receives.load() == 3);
  CHECK(would_block.load() == 0);
}

TEST_CASE("drained read: bytes that arrive while no read waits are read at once") {
  // After a write (the reactor's record of the event) and after a read
  // with nothing written between (a receive of its own).
  for (bool const wrote_between : {true, false}) {
    CAPTURE(wrote_between);
    Pair p;
    std::array<char, 64> buf{};
    Read r;
    asio::write(p.peer, asio::buffer("first", 5));
    read_into(p.ours, buf, r);
    p.run_until([&] { return r.ec.has_value(); });
    REQUIRE(r.n == 5);  // the socket is empty, and the reactor knows
    if (wrote_between) ours_writes(p.ours, "answer");
    asio::write(p.peer, asio::buffer("late", 4));
    reactor_takes_pending_events(p);  // their event spent with no read waiting
    watch(p.ours);
    read_into(p.ours, buf, r);
    p.run_until([&] { return r.ec.has_value(); });
    REQUIRE(r.ec == boost::system::error_code{});
    CHECK(std::string_view(buf.data(), r.n) == "late");
    CHECK(receives.load() == 1);
    CHECK(would_block.load() == 0);
  }
}

TEST_CASE("drained read: an end of stream is read at once, whenever it came") {
  // An upstream connection back in the pool that the server closes or
  // half-closes (a FIN, then it lingers) right after its answer, or a while
  // later: the next request's answer read must see the end at once, not
  // wait for an event that never comes. With the answer (one event for
  // both, before the answer is read: TCP_INQ counts the FIN as a byte left)
  // or after it (its own event, spent with no read waiting).
  for (bool const with_answer : {true, false}) {
    for (bool const full_close : {false, true}) {
      CAPTURE(with_answer);
      CAPTURE(full_close);
      Pair p;
      std::array<char, 64> buf{};
      Read r;
      boost::system::error_code ignored;
      auto const close = [&] {
        if (full_close)
          p.peer.close(ignored);
        else
          p.peer.shutdown(TcpSocket::shutdown_send, ignored);
      };
      asio::write(p.peer, asio::buffer("answer", 6));
      if (with_answer) {
        close();
        reactor_takes_pending_events(p);
      }
      read_into(p.ours, buf, r);
      p.run_until([&] { return r.ec.has_value(); });
      REQUIRE(r.ec == boost::system::error_code{});
      REQUIRE(r.n == 6);
      if (!with_answer) {
        close();
        reactor_takes_pending_events(p);
      }
      // The next request goes out on the connection, then its answer is read.
      ours_writes(p.ours, "request");
      read_into(p.ours, buf, r);
      p.run_until([&] { return r.ec.has_value(); });
      REQUIRE(r.ec.has_value());
      CHECK_MESSAGE(*r.ec == asio::error::eof, r.ec->message());
    }
  }
}

TEST_CASE("drained read: a reset that came with the last bytes ends the next read at once") {
  // TCP_INQ does not count a reset. The peer sends its last bytes and resets
  // (it closed with bytes unread), both before they are read; the next read
  // follows with no write begun since the last read completed, so it tries
  // its receive at once and meets the reset, rather than waiting for an
  // event already spent. Either the read waited while ours wrote (a
  // tunnel's two directions: the write succeeded before the reset came), or
  // the bytes came before any read.
  for (bool const read_waiting : {false, true}) {
    CAPTURE(read_waiting);
    Pair p;
    std::array<char, 64> buf{};
    Read r;
    if (read_waiting) read_into(p.ours, buf, r);
    ours_writes(p.ours, "to the peer");  // unread by the peer: its close is a reset
    p.peer.set_option(asio::socket_base::linger(true, 0));
    asio::write(p.peer, asio::buffer("last", 4));
    boost::system::error_code ignored;
    p.peer.close(ignored);
    if (!read_waiting) {
      reactor_takes_pending_events(p);
      read_into(p.ours, buf, r);
    }
    p.run_until([&] { return r.ec.has_value(); });
    REQUIRE(r.ec == boost::system::error_code{});
    REQUIRE(r.n == 4);
    read_into(p.ours, buf, r);
    p.run_until([&] { return r.ec.has_value(); });
    REQUIRE(r.ec.has_value());
    CHECK_MESSAGE(*r.ec == asio::error::connection_reset, r.ec->message());
  }
}
