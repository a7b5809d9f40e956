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

// RFC 3339 with milliseconds, formatted at most once per millisecond per
// thread: a busy proxy logs many lines within one.
const std::string& timestamp() {
  using namespace std::chrono;
  thread_local std::int64_t cached_ms = -1;
  thread_local std::string cached;
  auto const ms_total = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  if (ms_total == cached_ms) return cached;
  auto const secs = static_cast<std::time_t>(ms_total / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms_total % 1000));
  cached = buf;
  cached_ms = ms_total;
  return cached;
}
}  // namespace

void log_event(std::string_view event, boost::json::object fields) {
  // {"ts":"...","event":"...", then the fields' own members, in one buffer.
  std::string const body = boost::json::serialize(fields);
  std::string text;
  text.reserve(body.size() + 64);
  text += "{\"ts\":\"";
  text += timestamp();
  text += "\",\"event\":";
  text += boost::json::serialize(boost::json::value(boost::json::string_view(event.data(), event.size())));
  if (body.size() > 2) {
    text += ',';
    text.append(body, 1);
  } else {
    text += '}';
  }
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

void log_exception(std::string_view where, std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    log_event("internal_error", {{"where", where}, {"error", ex.what()}});
  } catch (...) {
    log_event("internal_error", {{"where", where}, {"error", "unknown exception"}});
  }
}

void set_request_log_enabled(bool on) { g_request_log.store(on, std::memory_order_relaxed); }
bool request_log_enabled() noexcept { return g_request_log.load(std::memory_order_relaxed); }

}  // namespace idemgate::proxy
