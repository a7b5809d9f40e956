// JSON-lines logging on stderr.
#include "proxy/log.hpp"

#include <boost/json/serialize.hpp>

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace idemgate::proxy {

namespace {
std::atomic<bool> g_request_log{true};

std::string timestamp() {
  using namespace std::chrono;
  auto const now = system_clock::now();
  auto const secs = system_clock::to_time_t(now);
  auto const ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}
}  // namespace

void log_event(std::string_view event, boost::json::object fields) {
  boost::json::object line;
  line.reserve(fields.size() + 2);
  line["ts"] = timestamp();
  line["event"] = event;
  for (auto& kv : fields) line[kv.key()] = std::move(kv.value());
  std::string text = boost::json::serialize(line);
  text += '\n';
  char const* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr gone: nothing sensible left to do
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

void set_request_log_enabled(bool on) { g_request_log.store(on, std::memory_order_relaxed); }
bool request_log_enabled() noexcept { return g_request_log.load(std::memory_order_relaxed); }

}  // namespace idemgate::proxy
