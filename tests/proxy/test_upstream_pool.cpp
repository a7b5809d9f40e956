// Which pooled connection a caller is handed: writes only trust one whose
// upstream announced an idle timeout that is far off.
#include "proxy/upstream_pool.hpp"

#include <boost/asio/io_context.hpp>
#include <doctest/doctest.h>

using namespace idemgate::proxy;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<UpstreamConnection> connection(boost::asio::io_context& ioc, std::chrono::steady_clock::duration keep_alive) {
  auto c = std::make_unique<UpstreamConnection>(ioc.get_executor());
  c->keep_alive_timeout = keep_alive;
  c->requests = 1;
  return c;
}

}  // namespace

TEST_CASE("pool: a write is not handed a connection without a known Keep-Alive timeout") {
  boost::asio::io_context ioc;
  UpstreamPool pool(8, 60s);
  pool.give_back("http://a:80", connection(ioc, 0s));
  CHECK(pool.take("http://a:80", Reuse::known_alive) == nullptr);
  CHECK(pool.stats().passed_over == 1);
  CHECK(pool.idle_count() == 1);  // still there for a read
  CHECK(pool.take("http://a:80", Reuse::any) != nullptr);
}

TEST_CASE("pool: a write takes a connection well inside its Keep-Alive timeout, skipping others") {
  boost::asio::io_context ioc;
  UpstreamPool pool(8, 60s);
  pool.give_back("http://a:80", connection(ioc, 30s));
  pool.give_back("http://a:80", connection(ioc, 0s));  // newest, but not trusted
  auto c = pool.take("http://a:80", Reuse::known_alive);
  REQUIRE(c != nullptr);
  CHECK(c->keep_alive_timeout == std::chrono::steady_clock::duration(30s));
  CHECK(pool.idle_count() == 1);
}

TEST_CASE("pool: past half the Keep-Alive timeout a write opens a fresh connection") {
  boost::asio::io_context ioc;
  UpstreamPool pool(8, 60s);
  // A timeout of one nanosecond: any time idle is past half of it.
  pool.give_back("http://a:80", connection(ioc, 1ns));
  CHECK(pool.take("http://a:80", Reuse::known_alive) == nullptr);
  CHECK(pool.take("http://a:80", Reuse::any) != nullptr);
}

TEST_CASE("pool: a full pool keeps the connection just back and closes its oldest") {
  boost::asio::io_context ioc;
  UpstreamPool pool(2, 60s);
  pool.give_back("http://a:80", connection(ioc, 10s));
  pool.give_back("http://a:80", connection(ioc, 20s));
  pool.give_back("http://a:80", connection(ioc, 30s));
  CHECK(pool.idle_count() == 2);
  CHECK(pool.stats().dropped_full == 1);
  auto newest = pool.take("http://a:80");
  REQUIRE(newest != nullptr);
  CHECK(newest->keep_alive_timeout == std::chrono::steady_clock::duration(30s));
  auto next = pool.take("http://a:80");
  REQUIRE(next != nullptr);
  CHECK(next->keep_alive_timeout == std::chrono::steady_clock::duration(20s));
  CHECK(pool.take("http://a:80") == nullptr);
}

TEST_CASE("pool: connections idle for the idle time are closed when another comes back") {
  boost::asio::io_context ioc;
  UpstreamPool pool(8, 1ns);  // any time idle is the whole idle time
  pool.give_back("http://a:80", connection(ioc, 10s));
  pool.give_back("http://a:80", connection(ioc, 20s));
  CHECK(pool.stats().dropped_stale == 1);
  CHECK(pool.idle_count() == 1);
  pool.give_back("http://b:80", connection(ioc, 20s));  // another upstream's list is its own
  CHECK(pool.idle_count() == 2);
}

TEST_CASE("pool: a pool of size 0 keeps nothing") {
  boost::asio::io_context ioc;
  UpstreamPool pool(0, 60s);
  pool.give_back("http://a:80", connection(ioc, 10s));
  CHECK(pool.idle_count() == 0);
  CHECK(pool.stats().dropped_full == 1);
}

TEST_CASE("pool: prune closes every upstream's connections idle for the idle time, and nothing newer") {
  boost::asio::io_context ioc;
  UpstreamPool stale_pool(8, 1ns);  // any time idle is the whole idle time
  stale_pool.give_back("http://a:80", connection(ioc, 10s));
  stale_pool.give_back("http://b:80", connection(ioc, 10s));
  stale_pool.prune();
  CHECK(stale_pool.idle_count() == 0);
  CHECK(stale_pool.stats().dropped_stale == 2);

  UpstreamPool fresh_pool(8, 60s);
  fresh_pool.give_back("http://a:80", connection(ioc, 10s));
  fresh_pool.prune();
  CHECK(fresh_pool.idle_count() == 1);
  CHECK(fresh_pool.take("http://a:80") != nullptr);
}
