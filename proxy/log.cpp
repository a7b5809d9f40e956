// JSON-lines logging on stderr through a writer thread (see log.hpp).
#include "proxy/log.hpp"

#include <boost/json/serialize.hpp>

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <mutex>
#include <thread>

namespace idemgate::proxy {

namespace {

std::atomic<bool> g_request_log{true};

// Queued bytes beyond which a line is dropped: seconds of a busy proxy's
// request log, so a disk that stalls costs lines, never traffic.
constexpr std::size_t kMaxPending = 4u * 1024 * 1024;
// The writer gathers lines for up to this long (or this many bytes) before
// one write(2): under load, thousands of lines per system call.
constexpr auto kGather = std::chrono::milliseconds(10);
constexpr std::size_t kWriteAt = 256u * 1024;
// The writer thread's name, for top -H and ps -L (a failure leaves it
// unnamed). Its priority stays the process's: the network threads share its
// mutex, and a writer at a lower priority, preempted while holding it, would
// hold them up until the scheduler came back to it.
void name_writer_thread() { ::pthread_setname_np(::pthread_self(), "idemgate-log"); }

void write_all(int fd, std::string_view text) {
  char const* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr gone: nothing sensible left to do
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// Now, as a line's "ts" (log_timestamp).
const std::string& timestamp() {
  using namespace std::chrono;
  return log_timestamp(duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}

// Bytes a JSON string may hold as they are (printable ASCII but '"' and '\\').
constexpr std::array<bool, 256> kPlain = [] {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x7f; ++c) t[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
  return t;
}();

}  // namespace

// Formatted whole at most once per second per thread (a busy proxy logs
// many lines within one); within the second only the three digits of the
// milliseconds are written.
const std::string& log_timestamp(std::int64_t ms_total) {
  thread_local std::int64_t cached_s = std::numeric_limits<std::int64_t>::min();
  thread_local std::string cached;  // "YYYY-MM-DDTHH:MM:SS.mmmZ"
  // Floor division: an instant before 1970 still falls in its own second.
  auto const s = ms_total / 1000 - (ms_total % 1000 < 0 ? 1 : 0);
  auto const ms = static_cast<int>(ms_total - s * 1000);
  if (s != cached_s) {
    auto const secs = static_cast<std::time_t>(s);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[64];  // room for any int the format could be given (-Wformat-truncation)
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.000Z", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    cached = buf;
    cached_s = s;
  }
  auto const at = cached.size() - 4;  // the milliseconds, before the 'Z'
  cached[at] = static_cast<char>('0' + ms / 100);
  cached[at + 1] = static_cast<char>('0' + ms / 10 % 10);
  cached[at + 2] = static_cast<char>('0' + ms % 10);
  return cached;
}

void append_ascii_json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  std::size_t run = 0;  // start of the pending stretch that needs no escape
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto const c = static_cast<unsigned char>(s[i]);
    if (kPlain[c]) continue;
    out.append(s, run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 0xf];
    }
  }
  out.append(s, run, s.size() - run);
  out += '"';
}

namespace {

template <class Int>
void append_int(std::string& out, Int v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

// stderr's sink. Never destroyed (threads that outlive main's objects may
// still log); stopped, so flushed, at exit.
LogSink& stderr_sink() {
  static LogSink* const sink = [] {
    auto* s = new LogSink(STDERR_FILENO, kMaxPending);
    std::atexit([] { stderr_sink().stop(); });
    return s;
  }();
  return *sink;
}

// Everything but the request log is rare and may matter right now (a fatal
// error, a reload): written without the gathering delay.
bool is_urgent(std::string_view event) { return event != "request" && event != "decision"; }

std::string& line_buffer() {
  thread_local std::string text;
  return text;
}

void begin_line(std::string& text, std::string_view event) {
  text.clear();
  text += "{\"ts\":\"";
  text += timestamp();
  text += "\",\"event\":";
  append_ascii_json_string(text, event);
}

}  // namespace

void log_event(std::string_view event, boost::json::object fields) {
  // {"ts":"...","event":"...", then the fields' own members, in one buffer.
  std::string const body = boost::json::serialize(fields);
  std::string& text = line_buffer();
  begin_line(text, event);
  if (body.size() > 2) {
    text += ',';
    text.append(body, 1);
  } else {
    text += '}';
  }
  text += '\n';
  stderr_sink().push(text, is_urgent(event));
}

LogLine::LogLine(std::string_view event) : text_(line_buffer()), urgent_(is_urgent(event)) {
  // log_event leaves the buffer at its line's size; a LogLine keeps it at
  // its full size (no clearing, no filling a line).
  if (text_.size() < 1024) text_.resize(1024);
  put("{\"ts\":\"");
  put(timestamp());
  put("\",\"event\":");
  put_string(event);
}

void LogLine::grow(std::size_t n) { text_.resize(std::max(2 * text_.size(), size_ + n)); }

void LogLine::put(std::string_view bytes) { std::memcpy(room(bytes.size()), bytes.data(), bytes.size()); }

void LogLine::put_string(std::string_view value) {
  // Written in place when no byte needs escaping (nearly always);
  // otherwise by the general escaper.
  if (std::all_of(value.begin(), value.end(), [](char c) { return kPlain[static_cast<unsigned char>(c)]; })) {
    char* p = room(value.size() + 2);
    *p++ = '"';
    std::memcpy(p, value.data(), value.size());
    p[value.size()] = '"';
    return;
  }
  std::string escaped;
  append_ascii_json_string(escaped, value);
  put(escaped);
}

void LogLine::key(std::string_view k) {
  // Keys are the code's own identifiers: no escaping needed.
  char* p = room(k.size() + 4);
  *p++ = ',';
  *p++ = '"';
  std::memcpy(p, k.data(), k.size());
  p += k.size();
  *p++ = '"';
  *p = ':';
}

LogLine& LogLine::add(std::string_view k, std::string_view value) {
  key(k);
  put_string(value);
  return *this;
}

namespace {

template <class Int>
std::size_t put_int(char* at, Int v) {
  return static_cast<std::size_t>(std::to_chars(at, at + 20, v).ptr - at);
}

}  // namespace

LogLine& LogLine::add(std::string_view k, std::uint64_t value) {
  key(k);
  size_ -= 20 - put_int(room(20), value);
  return *this;
}

LogLine& LogLine::add(std::string_view k, std::int64_t value) {
  key(k);
  size_ -= 20 - put_int(room(20), value);
  return *this;
}

LogLine& LogLine::add(std::string_view k, bool value) {
  key(k);
  put(value ? "true" : "false");
  return *this;
}

LogLine& LogLine::add_null(std::string_view k) {
  key(k);
  put("null");
  return *this;
}

void LogLine::emit() {
  put("}\n");
  stderr_sink().push(std::string_view(text_.data(), size_), urgent_);
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

LogStats log_stats() noexcept { return stderr_sink().stats(); }

void log_flush() { stderr_sink().flush(); }

LogSink::LogSink(int fd, std::size_t max_pending) : fd_(fd), max_pending_(max_pending), writer_([this] { run(); }) {}

LogSink::~LogSink() { stop(); }

void LogSink::push(std::string_view line, bool urgent) {
  lines_.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lock(mutex_);
  if (stopped_) {
    // After exit began: nobody is left to write it but us.
    lock.unlock();
    write_all(fd_, line);
    written_.fetch_add(line.size(), std::memory_order_relaxed);
    return;
  }
  if (pending_.size() + line.size() > max_pending_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  pending_.append(line);
  // One wake-up per batch: the writer gathers the rest by itself.
  bool const wake = !notified_ || (urgent && !urgent_) || pending_.size() >= kWriteAt;
  notified_ = true;
  urgent_ = urgent_ || urgent;
  lock.unlock();
  if (wake) ready_.notify_one();
}

void LogSink::flush() {
  std::unique_lock lock(mutex_);
  if (stopped_) return;
  std::uint64_t const target = ++flush_requests_;
  urgent_ = true;
  ready_.notify_one();
  flushed_cv_.wait(lock, [&] { return flushed_ >= target || stopped_; });
}

void LogSink::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  ready_.notify_one();
  writer_.join();
}

LogStats LogSink::stats() const noexcept {
  return {lines_.load(std::memory_order_relaxed), dropped_.load(std::memory_order_relaxed),
          written_.load(std::memory_order_relaxed)};
}

void LogSink::run() {
  name_writer_thread();
  std::string writing;
  std::uint64_t reported_dropped = 0;
  auto last_report = std::chrono::steady_clock::time_point{};
  std::unique_lock lock(mutex_);
  for (;;) {
    ready_.wait(lock, [&] { return !pending_.empty() || stopping_ || flush_requests_ > flushed_; });
    if (!urgent_ && !stopping_) {
      ready_.wait_for(lock, kGather, [&] { return urgent_ || stopping_ || pending_.size() >= kWriteAt; });
    }
    writing.swap(pending_);
    notified_ = false;
    urgent_ = false;
    std::uint64_t const flushing = flush_requests_;
    bool const last = stopping_;
    lock.unlock();
    write_all(fd_, writing);
    written_.fetch_add(writing.size(), std::memory_order_relaxed);
    writing.clear();
    // Dropped lines are told at most once a second, and at the end.
    auto const dropped = dropped_.load(std::memory_order_relaxed);
    auto const now = std::chrono::steady_clock::now();
    if (dropped != reported_dropped && (last || now - last_report >= std::chrono::seconds(1))) {
      std::string line = "{\"ts\":\"" + timestamp() + "\",\"event\":\"log_lines_dropped\",\"dropped\":";
      append_int(line, dropped - reported_dropped);
      line += ",\"dropped_total\":";
      append_int(line, dropped);
      line += ",\"detail\":\"the log buffer was full: stderr is slower than the traffic\"}\n";
      write_all(fd_, line);
      reported_dropped = dropped;
      last_report = now;
    }
    lock.lock();
    flushed_ = flushing;
    flushed_cv_.notify_all();
    if (last && pending_.empty()) break;
  }
  stopped_ = true;
  flushed_cv_.notify_all();
}

}  // namespace idemgate::proxy
