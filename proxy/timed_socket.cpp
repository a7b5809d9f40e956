#include "proxy/timed_socket.hpp"
#include "ledger/executor.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
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
  boost::system::error_code ignored;
  s.socket.close(ignored);  // every pending operation completes, as a timeout
}

}  // namespace idemgate::proxy
