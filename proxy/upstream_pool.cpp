// Per-thread upstream keep-alive pool.
#include "proxy/upstream_pool.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <iterator>

namespace idemgate::proxy {

namespace {

// An idle connection must have nothing to read: EOF or stray bytes mean the
// upstream closed it or broke framing, and a request sent on it would fail
// after leaving (an unknown outcome we can avoid for free). On TLS, bytes
// waiting while idle are a close_notify or a record we cannot judge: dropped too.
bool still_usable(UpstreamConnection& c) {
  auto& sock = c.stream.socket();
  if (!sock.is_open()) return false;
  char byte;
  ssize_t n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
  return false;
}

}  // namespace

UpstreamPool::UpstreamPool(std::size_t max_idle_per_key, std::chrono::steady_clock::duration idle_ttl)
    : max_idle_per_key_(max_idle_per_key), idle_ttl_(idle_ttl) {}

std::unique_ptr<UpstreamConnection> UpstreamPool::take(const std::string& key, Reuse reuse) {
  auto it = idle_.find(key);
  if (it == idle_.end()) return nullptr;
  auto& list = it->second;
  auto const now = std::chrono::steady_clock::now();
  // Newest first: the most recently used connection is the likeliest alive.
  for (auto i = list.size(); i-- > 0;) {
    auto& c = list[i];
    auto const idle_for = now - c->idle_since;
    bool const trusted = reuse == Reuse::any ||
                         (c->keep_alive_timeout > decltype(idle_for)::zero() && idle_for * 2 <= c->keep_alive_timeout);
    if (!trusted && idle_for < idle_ttl_) {
      ++stats_.passed_over;
      continue;
    }
    auto taken = std::move(c);
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    // A connection back in the pool less than a second ago is reused as is
    // (under load that is nearly every reuse, and the check is a syscall);
    // older ones are checked for an EOF the upstream sent while they idled.
    if (trusted && idle_for < idle_ttl_ && (idle_for < std::chrono::seconds(1) || still_usable(*taken))) {
      ++stats_.reused;
      return taken;
    }
    ++stats_.dropped_stale;
  }
  return nullptr;
}

void UpstreamPool::drop_stale(std::vector<std::unique_ptr<UpstreamConnection>>& list,
                              std::chrono::steady_clock::time_point now) {
  // The list is in the order the connections came back, oldest first.
  std::size_t stale = 0;
  while (stale < list.size() && now - list[stale]->idle_since >= idle_ttl_) ++stale;
  stats_.dropped_stale += stale;
  list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(stale));
}

void UpstreamPool::give_back(const std::string& key, std::unique_ptr<UpstreamConnection> c) {
  if (max_idle_per_key_ == 0) {
    ++stats_.dropped_full;
    return;
  }
  auto& list = idle_[key];
  auto const now = std::chrono::steady_clock::now();
  // Those idle for idle_ttl are closed here (no take would use them), and
  // a full list closes its oldest: the one just back is the likeliest to
  // stay alive, and a pool full of stale connections would otherwise drop
  // every fresh one.
  drop_stale(list, now);
  std::size_t const full = list.size() >= max_idle_per_key_ ? list.size() - max_idle_per_key_ + 1 : 0;
  stats_.dropped_full += full;
  list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(full));
  c->idle_since = now;
  c->stream.expires_never();
  list.push_back(std::move(c));
}

void UpstreamPool::prune() {
  auto const now = std::chrono::steady_clock::now();
  for (auto it = idle_.begin(); it != idle_.end();) {
    drop_stale(it->second, now);
    it = it->second.empty() ? idle_.erase(it) : std::next(it);
  }
}

void UpstreamPool::clear() { idle_.clear(); }

std::size_t UpstreamPool::idle_count() const noexcept {
  std::size_t n = 0;
  for (auto const& [key, list] : idle_) n += list.size();
  return n;
}

}  // namespace idemgate::proxy
