// A TCP socket with one deadline for whatever I/O is pending on it, the way
// beast::tcp_stream has, but cheap to move on every operation.
//
// beast::tcp_stream starts its timer when an operation begins and cancels it
// when the operation ends: two timer-queue updates, a cancelled timer's
// handler and a clock read per read or write, four or five times a request
// (a tenth of the network thread on the pass-through path). Here the timer
// is lazy: setting the deadline stores a time point; the timer is armed only
// when an operation begins and no earlier wake-up is set; when it fires it
// compares the deadline as it is then, and waits again if the deadline moved
// later. A connection whose deadline keeps moving forward costs a clock read
// per operation and one timer wake-up per timeout period, not two timer-queue
// updates and a handler per operation.
//
// Once the deadline passes while an operation is pending (or before one
// begins), the socket is closed and every pending operation completes with
// beast::error::timeout, as with beast::tcp_stream. The stream is dead
// afterwards: later operations fail too. Unlike beast::tcp_stream, the one
// deadline covers every operation pending on the socket, including those
// begun before it was set: a tunnel whose bytes flow one way keeps the read
// waiting the other way alive.
#pragma once

#include "ledger/executor.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detail/reactive_socket_recv_op.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/version.hpp>
#include <boost/beast/core/error.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

// Whether a read that empties the socket spares the next read its receive
// (DrainedRead below). It leans on the epoll reactor's bookkeeping of Asio
// 1.26 (Boost 1.81), read for this, and on Linux's TCP_INQ: another version
// or backend reads as Asio does by default, one receive tried at once every
// time.
#if BOOST_ASIO_VERSION == 102600 && defined(BOOST_ASIO_HAS_EPOLL) && \
    !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT) && defined(__linux__)
#define IDEMGATE_DRAINED_READ 1
#else
#define IDEMGATE_DRAINED_READ 0
#endif

namespace idemgate::proxy::timed_detail {

// One buffer read from a TCP socket that has TCP_INQ on, marked so that the
// reactor learns when the read emptied the socket.
//
// Asio tries every read at once (a receive, then epoll when it would block).
// After a request or an answer read whole, the next read almost always finds
// nothing yet: its receive fails with EAGAIN, about two failed system calls
// a proxied request. With TCP_INQ the kernel says, with each receive, how
// many bytes are left, and counts an end of stream that has arrived as one:
// a receive that comes back short and leaves nothing has emptied the socket,
// and every byte or end of stream that arrives after it raises a new epoll
// event (edge-triggered: each arrival wakes the watcher). Told so
// (done_and_exhausted), the reactor tries no receive for the next read until
// such an event, which it records even with no read waiting. (nginx reads on
// the same terms, with the peer's half-close from EPOLLRDHUP in place of
// TCP_INQ's count; Asio's reactor does not ask epoll for it.)
//
// A reset is the one thing TCP_INQ does not count. One that came with the
// last bytes read fails any write begun after that read completed, so a read
// that follows such a write is safe; a read with no write begun since the
// last read completed (the rest of a body or of an answer, a tunnel's next
// bytes) tries a receive of its own first (TimedSocket::async_read_some), as
// Asio would have.
struct DrainedRead : boost::asio::mutable_buffer {
  explicit DrainedRead(const boost::asio::mutable_buffer& b) noexcept : boost::asio::mutable_buffer(b) {}
};

}  // namespace idemgate::proxy::timed_detail

#if IDEMGATE_DRAINED_READ
template <>
boost::asio::detail::reactor_op::status
boost::asio::detail::reactive_socket_recv_op_base<idemgate::proxy::timed_detail::DrainedRead>::do_perform(
    boost::asio::detail::reactor_op* base);
#endif

namespace idemgate::proxy {

namespace timed_detail {

using Clock = std::chrono::steady_clock;

// Shared by the socket, its timer's handler and each pending operation's
// handler, so that whichever ends last frees it.
struct State {
  explicit State(TcpSocket s) : socket(std::move(s)), timer(socket.get_executor()) {}

  TcpSocket socket;
  SteadyTimer timer;
  Clock::time_point deadline = Clock::time_point::max();
  Clock::time_point armed = Clock::time_point::max();  // the timer's expiry while it waits
  std::size_t pending = 0;                              // operations begun and not completed
  bool timed_out = false;
  // For DrainedRead: the descriptor TCP_INQ was last tried on (forgotten
  // when the socket is closed here; a socket that Asio's connect opened
  // again under the same number keeps the flags, and without TCP_INQ on, a
  // short read counts as "more may be waiting", Asio's default) and whether
  // it took; whether the last read came back short (the reactor may then
  // skip the next read's receive); whether a write was begun since the last
  // read completed.
  int inq_socket = -1;
  bool inq = false;
  bool read_short = false;
  bool wrote = false;
};

// Completes an operation: uncounts it and reports a timeout as such.
template <class Handler>
struct Finish {
  std::shared_ptr<State> state;
  Handler handler;
  std::size_t read_room = 0;  // a read's buffer size, to note whether it came back short

  template <class... Args>
  void operator()(boost::system::error_code ec, Args&&... args) {
    --state->pending;
    if constexpr (sizeof...(Args) == 1 && (std::is_same_v<std::decay_t<Args>, std::size_t> && ...)) {
      if (read_room != 0) {
        state->read_short = (args + ...) < read_room;
        state->wrote = false;
      }
    }
    if (ec && state->timed_out) ec = boost::beast::error::timeout;
    state.reset();
    std::move(handler)(ec, std::forward<Args>(args)...);
  }
};

}  // namespace timed_detail

class TimedSocket {
public:
  using executor_type = Executor;
  using lowest_layer_type = TcpSocket;  // what asio::ssl::stream asks of its next layer

  explicit TimedSocket(executor_type ex);
  explicit TimedSocket(TcpSocket socket);
  ~TimedSocket();
  TimedSocket(const TimedSocket&) = delete;
  TimedSocket& operator=(const TimedSocket&) = delete;

  executor_type get_executor() noexcept { return state_->socket.get_executor(); }
  TcpSocket& socket() noexcept { return state_->socket; }
  lowest_layer_type& lowest_layer() noexcept { return state_->socket; }

  // The deadline for every operation pending now or begun later. Measured
  // from the coarse clock (see coarse_now): up to a few milliseconds early.
  void expires_after(timed_detail::Clock::duration d) { expires_at(coarse_now() + d); }
  void expires_at(timed_detail::Clock::time_point t);
  void expires_never() noexcept { state_->deadline = timed_detail::Clock::time_point::max(); }
  void close();

  template <class MutableBufferSequence, class ReadToken>
  auto async_read_some(const MutableBufferSequence& buffers, ReadToken&& token) {
    return boost::asio::async_initiate<ReadToken, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const MutableBufferSequence& b) {
          bool const live = begin();
          if constexpr (IDEMGATE_DRAINED_READ &&
                        std::is_convertible_v<const MutableBufferSequence*, const boost::asio::mutable_buffer*>) {
            boost::asio::mutable_buffer const one(b);
            if (live && one.size() != 0 && drained_reads()) {
              auto& s = *state_;
              bool const continued = s.read_short && !s.wrote;
              auto f = finish(std::move(handler), one.size());
              if (continued) {
                boost::system::error_code ec;
                std::size_t const n = receive_now(one, ec);
                if (ec != boost::asio::error::would_block) {
                  boost::asio::post(get_executor(), boost::asio::append(std::move(f), ec, n));
                  return;
                }
              }
              s.socket.async_read_some(timed_detail::DrainedRead(one), std::move(f));
              return;
            }
          }
          state_->socket.async_read_some(b, finish(std::move(handler)));
        },
        token, buffers);
  }

  template <class ConstBufferSequence, class WriteToken>
  auto async_write_some(const ConstBufferSequence& buffers, WriteToken&& token) {
    return boost::asio::async_initiate<WriteToken, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const ConstBufferSequence& b) {
          begin();
          state_->wrote = true;
          state_->socket.async_write_some(b, finish(std::move(handler)));
        },
        token, buffers);
  }

  // Writes what the socket takes at once, without waiting and without an
  // Asio operation (no trip through the scheduler): a small answer usually
  // fits the send buffer whole. would_block when it takes nothing; a
  // timed-out socket reports timeout, as an operation would. No deadline is
  // needed: nothing waits.
  template <class ConstBufferSequence>
  std::size_t write_some_now(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
    if (state_->timed_out) {
      ec = boost::beast::error::timeout;
      return 0;
    }
    auto& socket = state_->socket;
    state_->wrote = true;
    // The user-level flag (Asio's own operations do not depend on it); set
    // once, it stays for the socket's life, so a synchronous read or write
    // on the socket would fail with would_block rather than wait: the proxy
    // has none.
    if (!socket.non_blocking()) {
      socket.non_blocking(true, ec);
      if (ec) return 0;
    }
    return socket.write_some(buffers, ec);
  }

  // Acknowledges at once what has arrived (TCP_QUICKACK), for a message that
  // came in part: a peer that writes an answer's header and its body apart,
  // without TCP_NODELAY (Nagle), holds the body until the header's ACK,
  // which the kernel delays by 40 ms or more on a connection that has sent
  // requests. One system call, made only when a message is incomplete; a
  // failure changes nothing but the timing.
  void ack_now() noexcept;

  // Until the socket is readable: an idle keep-alive connection waits with no
  // buffer at all.
  template <class WaitToken>
  auto async_wait_readable(WaitToken&& token) {
    return boost::asio::async_initiate<WaitToken, void(boost::system::error_code)>(
        [this](auto handler) {
          begin();  // past the deadline: the socket is closed and the wait fails
          state_->socket.async_wait(TcpSocket::wait_read, finish(std::move(handler)));
        },
        token);
  }

  // Tries each endpoint in turn, all within the one deadline.
  template <class EndpointSequence, class ConnectToken>
  auto async_connect(const EndpointSequence& endpoints, ConnectToken&& token) {
    using Endpoint = boost::asio::ip::tcp::endpoint;
    return boost::asio::async_initiate<ConnectToken, void(boost::system::error_code, Endpoint)>(
        [this](auto handler, const EndpointSequence& e) {
          if (begin()) {
            boost::asio::async_connect(state_->socket, e, finish(std::move(handler)));
          } else {
            // A closed socket would only be opened again by the connect.
            boost::asio::post(get_executor(), [f = finish(std::move(handler))]() mutable {
              std::move(f)(boost::asio::error::operation_aborted, Endpoint{});
            });
          }
        },
        token, endpoints);
  }

  // steady_clock's time as of the last scheduler tick (CLOCK_MONOTONIC_COARSE,
  // the same clock at jiffy resolution): read twice per request, the precise
  // clock was 3% of the network thread on this kind of VM, and deadlines are
  // whole seconds.
  static timed_detail::Clock::time_point coarse_now() noexcept;

private:
  template <class Handler>
  timed_detail::Finish<Handler> finish(Handler&& h, std::size_t read_room = 0) {
    return {state_, std::forward<Handler>(h), read_room};
  }

  // Whether this socket's reads go as DrainedRead: TCP_INQ is on, tried
  // once for each socket.
  bool drained_reads() noexcept;
  // One receive that does not wait: would_block when nothing has come.
  std::size_t receive_now(boost::asio::mutable_buffer b, boost::system::error_code& ec) noexcept;

  // Counts an operation and has the timer watch the deadline; false when the
  // deadline has passed already (the socket is then closed).
  bool begin();
  static void arm(const std::shared_ptr<timed_detail::State>& state, timed_detail::Clock::time_point at);
  static void on_timer(const std::shared_ptr<timed_detail::State>& state);
  static void expire(timed_detail::State& s);  // the deadline passed: closed, and timed out

  std::shared_ptr<timed_detail::State> state_;
};

}  // namespace idemgate::proxy

// A completion handler keeps the executor, allocator and cancellation slot of
// the handler it wraps: a coroutine resumes where it would have without it.
template <template <typename, typename> class Associator, typename Handler, typename DefaultCandidate>
struct boost::asio::associator<Associator, idemgate::proxy::timed_detail::Finish<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
  using type = typename Associator<Handler, DefaultCandidate>::type;

  static type get(const idemgate::proxy::timed_detail::Finish<Handler>& f) noexcept {
    return Associator<Handler, DefaultCandidate>::get(f.handler);
  }
  static auto get(const idemgate::proxy::timed_detail::Finish<Handler>& f, const DefaultCandidate& c) noexcept
      -> decltype(Associator<Handler, DefaultCandidate>::get(f.handler, c)) {
    return Associator<Handler, DefaultCandidate>::get(f.handler, c);
  }
};
