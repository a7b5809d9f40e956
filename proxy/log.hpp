// One JSON object per line on stderr. Callers format a line and hand it to a
// writer thread through a bounded buffer, so a network thread never waits on
// the disk: when the buffer is full the line is dropped and counted (and the
// count is logged once the writer catches up). Never given a secret.
#pragma once

#include <boost/json/object.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace idemgate::proxy {

// Adds "ts" (RFC 3339, UTC, milliseconds) and "event", then queues the line.
void log_event(std::string_view event, boost::json::object fields);

// Logs an exception that ended a coroutine (a co_spawn completion handler's
// argument) as "internal_error" with where it happened; null: nothing.
void log_exception(std::string_view where, std::exception_ptr e);

// The same line built field by field into a reused per-thread buffer, with
// no JSON object in between: the request log's path, once per request.
// One at a time per thread: build and emit() it in one go.
class LogLine {
public:
  explicit LogLine(std::string_view event);
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;

  LogLine& add(std::string_view key, std::string_view value);
  LogLine& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  LogLine& add(std::string_view key, std::uint64_t value);
  LogLine& add(std::string_view key, std::int64_t value);
  LogLine& add(std::string_view key, unsigned value) { return add(key, std::uint64_t{value}); }
  LogLine& add(std::string_view key, int value) { return add(key, std::int64_t{value}); }
  LogLine& add(std::string_view key, bool value);
  LogLine& add_null(std::string_view key);
  void emit();

private:
  void key(std::string_view k);
  // n more bytes at the end of the line: the per-thread buffer is kept at
  // its full size and written through a pointer, so a field costs a few
  // copies, not a string append per piece.
  char* room(std::size_t n) {
    if (size_ + n > text_.size()) grow(n);
    char* const at = text_.data() + size_;
    size_ += n;
    return at;
  }
  void grow(std::size_t n);
  void put(std::string_view bytes);
  void put_string(std::string_view value);  // as a JSON string
  std::string& text_;  // the bytes [0, size_) are the line so far
  std::size_t size_ = 0;
  bool urgent_;
};

// Turns request logging off (benchmarks and tests that count lines set it).
void set_request_log_enabled(bool);
bool request_log_enabled() noexcept;

struct LogStats {
  std::uint64_t lines = 0;    // queued for the writer
  std::uint64_t dropped = 0;  // refused because the buffer was full
  std::uint64_t written_bytes = 0;
};
LogStats log_stats() noexcept;

// Blocks until every line queued so far is written (shutdown, fatal errors).
void log_flush();

// The "ts" of a line made `ms` milliseconds after the epoch (RFC 3339, UTC,
// milliseconds). The date and time are formatted once a second per thread;
// the reference stays valid until this thread's next call.
const std::string& log_timestamp(std::int64_t ms);

// Appends s as a JSON string: quotes, backslashes, control characters and
// bytes outside ASCII escaped, so a line stays ASCII JSON whatever a peer sent
// (the ledger's detail::append_json_string keeps UTF-8 as sent, as Boost.JSON does).
void append_ascii_json_string(std::string& out, std::string_view s);

// The writer thread and its bounded buffer (one for stderr; tests make
// their own on a pipe). Lines are whole: each ends with '\n'.
class LogSink {
public:
  LogSink(int fd, std::size_t max_pending);
  ~LogSink();  // stop()
  LogSink(const LogSink&) = delete;
  LogSink& operator=(const LogSink&) = delete;

  // Queues line, or drops and counts it when max_pending bytes are waiting.
  // urgent: written without the gathering delay.
  void push(std::string_view line, bool urgent);
  void flush();
  // Writes what is queued and ends the thread; later lines are written
  // directly by their caller.
  void stop();
  LogStats stats() const noexcept;

private:
  void run();

  int const fd_;
  std::size_t const max_pending_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable flushed_cv_;
  std::string pending_;
  bool notified_ = false;
  bool urgent_ = false;
  bool stopping_ = false;
  bool stopped_ = false;
  std::uint64_t flush_requests_ = 0;
  std::uint64_t flushed_ = 0;
  std::atomic<std::uint64_t> lines_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> written_{0};
  std::thread writer_;  // last: starts once the members above exist
};

}  // namespace idemgate::proxy
