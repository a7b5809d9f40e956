#include "proxy/timed_socket.hpp"
#include "ledger/executor.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <time.h>

namespace idemgate::proxy {

using timed_detail::Clock;
using timed_detail::State;

Clock::time_point TimedSocket::coarse_now() noexcept {
  static_assert(Clock::is_steady);
  timespec ts{};
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) return Clock::now();
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                                       std::chrono::nanoseconds(ts.tv_nsec)));
}

TimedSocket::TimedSocket(executor_type ex)
    : state_(std::make_shared<State>(TcpSocket(std::move(ex)))) {}

TimedSocket::TimedSocket(TcpSocket socket) : state_(std::make_shared<State>(std::move(socket))) {}

TimedSocket::~TimedSocket() { close(); }

void TimedSocket::close() {
  state_->inq_socket = -1;
  boost::system::error_code ignored;
  state_->socket.close(ignored);  // pending operations complete (aborted) and let go of the state
  state_->timer.cancel();
  state_->armed = Clock::time_point::max();  // a wait that already fired does not arm again (on_timer)
}

void TimedSocket::ack_now() noexcept {
  int const one = 1;
  ::setsockopt(state_->socket.native_handle(), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}

void TimedSocket::expires_at(Clock::time_point t) {
  state_->deadline = t;
  // With nothing pending the next operation arms the timer; a later deadline
  // waits for the wake-up already set, which then waits again.
  if (state_->pending != 0 && t < state_->armed) arm(state_, t);
}

bool TimedSocket::begin() {
  auto& s = *state_;
  ++s.pending;
  if (s.deadline == Clock::time_point::max()) return true;
  if (s.deadline <= coarse_now()) {  // past already: fails even with data waiting, as beast's does
    expire(s);
    return false;
  }
  if (s.deadline < s.armed) arm(state_, s.deadline);
  return true;
}

void TimedSocket::arm(const std::shared_ptr<State>& state, Clock::time_point at) {
  state->armed = at;
  state->timer.expires_at(at);  // an earlier wait completes as aborted, and does nothing
  state->timer.async_wait([state](boost::system::error_code ec) {
    if (ec != boost::asio::error::operation_aborted) on_timer(state);
  });
}

void TimedSocket::on_timer(const std::shared_ptr<State>& state) {
  auto& s = *state;
  s.armed = Clock::time_point::max();
  // Closed (the aborted operations' completions are still queued), no
  // deadline, or nothing pending: the next operation arms again.
  if (!s.socket.is_open() || s.deadline == Clock::time_point::max() || s.pending == 0) return;
  if (Clock::now() < s.deadline) {
    arm(state, s.deadline);  // the deadline moved later since the timer was set
    return;
  }
  expire(s);
}

void TimedSocket::expire(State& s) {
  s.timed_out = true;
  s.inq_socket = -1;
  boost::system::error_code ignored;
  s.socket.close(ignored);  // every pending operation completes, as a timeout
}

bool TimedSocket::drained_reads() noexcept {
  auto& s = *state_;
  int const fd = s.socket.native_handle();
  if (fd != s.inq_socket) {
    int const one = 1;
    s.inq_socket = fd;
    s.inq = ::setsockopt(fd, SOL_TCP, TCP_INQ, &one, sizeof one) == 0;
    s.read_short = false;
    s.wrote = false;
  }
  return s.inq;
}

std::size_t TimedSocket::receive_now(boost::asio::mutable_buffer b, boost::system::error_code& ec) noexcept {
  // Asio's own non-waiting receive: EINTR retried, an end of stream as eof.
  std::size_t n = 0;
  if (!boost::asio::detail::socket_ops::non_blocking_recv1(state_->socket.native_handle(), b.data(), b.size(),
                                                           MSG_DONTWAIT, true, ec, n))
    ec = boost::asio::error::would_block;
  return n;
}

}  // namespace idemgate::proxy

#if !IDEMGATE_DRAINED_READ && defined(__linux__)
#pragma message("idemgate: DrainedRead is off (it is written for Asio 1.26's epoll reactor): every read tries a receive at once")
#endif

#if IDEMGATE_DRAINED_READ
// Asio's own receive (non_blocking_recv1, as its single-buffer path calls
// it) made with recvmsg, to read TCP_INQ's count of what is left, and one
// more outcome: a receive that brought fewer bytes than the buffer holds and
// left none (no end of stream either) has emptied the socket. The reactor
// then tries no receive for the next read until epoll reports the socket
// readable again. An end of stream or an error is exhausted, as with Asio.
template <>
boost::asio::detail::reactor_op::status
boost::asio::detail::reactive_socket_recv_op_base<idemgate::proxy::timed_detail::DrainedRead>::do_perform(
    reactor_op* base) {
  auto* o = static_cast<reactive_socket_recv_op_base*>(base);
  std::size_t const room = o->buffers_.size();
  for (;;) {
    iovec iov{o->buffers_.data(), room};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t const n = ::recvmsg(o->socket_, &msg, o->flags_);
    if (n < 0) {
      int const e = errno;
      if (e == EINTR) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return not_done;
      o->ec_ = boost::system::error_code(e, boost::asio::error::get_system_category());
      o->bytes_transferred_ = 0;
      return done_and_exhausted;
    }
    o->bytes_transferred_ = static_cast<std::size_t>(n);
    if (n == 0) {
      o->ec_ = boost::asio::error::eof;
      return done_and_exhausted;
    }
    o->ec_ = boost::system::error_code();
    if (static_cast<std::size_t>(n) == room) return done;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_TCP || c->cmsg_type != TCP_CM_INQ) continue;
      int left = 0;
      std::memcpy(&left, CMSG_DATA(c), sizeof left);
      return left == 0 ? done_and_exhausted : done;
    }
    return done;  // no count: assume more
  }
}
#endif
