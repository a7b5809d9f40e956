// Real loopback TCP for TimedSocket's tests: a connected pair, and an
// io_context run until a condition holds or a guard passes.
#pragma once

#include "proxy/timed_socket.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <chrono>

namespace idemgate::test {

// Runs `ioc` until `done` or a 20 s guard: a test that hangs fails instead.
template <class Done>
void run_until(boost::asio::io_context& ioc, Done done) {
  using namespace std::chrono_literals;
  auto const guard = std::chrono::steady_clock::now() + 20s;
  while (!done() && std::chrono::steady_clock::now() < guard) {
    ioc.restart();  // run_for stops the context when it runs out of work
    ioc.run_for(10ms);
  }
}

// Connects `ours` to `peer` over loopback, through a listener on port 0.
inline void connect_loopback(boost::asio::io_context& ioc, proxy::TimedSocket& ours, TcpSocket& peer) {
  using boost::asio::ip::tcp;
  TcpAcceptor acceptor(ioc, tcp::endpoint(boost::asio::ip::address_v4::loopback(), 0));
  ours.socket().connect(acceptor.local_endpoint());
  acceptor.accept(peer);
}

// A connected pair on loopback: ours (a TimedSocket) and the peer's socket.
struct Pair {
  boost::asio::io_context ioc;
  proxy::TimedSocket ours{ioc.get_executor()};
  TcpSocket peer{ioc};

  Pair() { connect_loopback(ioc, ours, peer); }

  template <class Done>
  void run_until(Done done) {
    test::run_until(ioc, done);
  }

  // The peer writes one byte after `after` (the stimulus of the test).
  void peer_writes_after(std::chrono::milliseconds after, SteadyTimer& t) {
    t.expires_after(after);
    t.async_wait([this](boost::system::error_code) { boost::asio::write(peer, boost::asio::buffer("x", 1)); });
  }
};

}  // namespace idemgate::test
