// The log's JSON escaping and its writer thread: lines are whole, in order,
// a full buffer drops (and counts) lines instead of blocking the caller, and
// the thread is named and keeps its caller's priority.
#include "proxy/log.hpp"

#include <boost/json/parse.hpp>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace idemgate::proxy;

namespace {

// Everything the pipe holds until EOF.
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    out.push_back(text.substr(start, nl - start));
  CHECK(start == text.size());  // nothing after the last newline
  return out;
}

}  // namespace

TEST_CASE("log: JSON strings escape quotes, backslashes, control bytes and non-ASCII") {
  std::string out;
  append_ascii_json_string(out, std::string_view("a\"b\\c\nd\x01\xc3\xa9/e", 12));
  CHECK(out == R"("a\"b\\c\nd\u0001\u00c3\u00a9/e")");
  // Bytes above 0x7f read back as the code points of the same number (each
  // two bytes of UTF-8): the line stays valid JSON, the byte values visible.
  auto v = boost::json::parse(out);
  CHECK(std::string(v.as_string()) == std::string("a\"b\\c\nd\x01\xc3\x83\xc2\xa9/e"));
}

TEST_CASE("log: every line queued is written whole and in order, then stop flushes") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::string text;
  {
    LogSink sink(fds[1], 1 << 20);
    for (int i = 0; i < 1000; ++i) sink.push("{\"i\":" + std::to_string(i) + "}\n", i % 100 == 0);
    sink.flush();
    CHECK(sink.stats().lines == 1000);
    CHECK(sink.stats().dropped == 0);
    sink.stop();
    ::close(fds[1]);
    text = read_all(fds[0]);
  }
  ::close(fds[0]);
  auto const lines = lines_of(text);
  REQUIRE(lines.size() == 1000);
  for (int i = 0; i < 1000; ++i) CHECK(lines[static_cast<std::size_t>(i)] == "{\"i\":" + std::to_string(i) + "}");
}

TEST_CASE("log: the writer thread is named idemgate-log and runs at its caller's priority") {
  errno = 0;
  int const nice = ::getpriority(PRIO_PROCESS, 0);  // this thread's
  REQUIRE(errno == 0);
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  LogSink sink(fds[1], 1 << 20);
  sink.push("{}\n", true);
  sink.flush();  // the writer has been through its loop: it is named
  // Every thread of this process named idemgate-log (the stderr sink's too,
  // if a test made it) and its nice value, field 19 of its stat line.
  std::vector<int> writers;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "idemgate-log") continue;
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    std::istringstream rest(line.substr(line.rfind(')') + 2));  // after "pid (comm) "
    std::string field;
    for (int i = 3; i <= 19 && rest >> field; ++i) {}
    writers.push_back(std::stoi(field));
  }
  REQUIRE_FALSE(writers.empty());
  // Not lowered: the network threads share its mutex (log.cpp).
  for (int writer_nice : writers) CHECK(writer_nice == nice);
  sink.stop();
  ::close(fds[1]);
  ::close(fds[0]);
}

TEST_CASE("log: a stalled reader costs dropped lines, counted and reported, never a blocked caller") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  // A small pipe and a small buffer: nobody reads, so the writer blocks in
  // write(2) and the buffer fills.
  ::fcntl(fds[1], F_SETPIPE_SZ, 4096);
  std::string const line(100, 'x');
  std::string const one = "{\"p\":\"" + line + "\"}\n";
  LogSink sink(fds[1], 8 * 1024);
  int const total = 2000;  // 220 KB against 4 KiB of pipe and 8 KiB of buffer
  for (int i = 0; i < total; ++i) sink.push(one, false);  // returns at once even while the writer is stuck
  auto const stats = sink.stats();
  CHECK(stats.lines == static_cast<std::uint64_t>(total));
  CHECK(stats.dropped > 0);
  // Drain the pipe while the sink finishes: what was written plus what was
  // dropped is everything, and the drop is told in its own line.
  std::string text;
  std::thread reader([&] { text = read_all(fds[0]); });
  sink.stop();
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  auto const lines = lines_of(text);
  std::uint64_t written = 0;
  std::uint64_t reported = 0;
  for (auto const& l : lines) {
    auto v = boost::json::parse(l).as_object();
    if (v.contains("p")) {
      ++written;
    } else {
      CHECK(v.at("event").as_string() == "log_lines_dropped");
      reported += static_cast<std::uint64_t>(v.at("dropped").as_int64());
    }
  }
  CHECK(written + stats.dropped == static_cast<std::uint64_t>(total));
  CHECK(reported == stats.dropped);
}

TEST_CASE("log: a timestamp is the instant's, to the millisecond, across seconds, days and 1970") {
  // Formatted whole each time, as the cache must agree with.
  auto const reference = [](std::int64_t ms) {
    std::int64_t s = ms / 1000 - (ms % 1000 < 0 ? 1 : 0);
    auto const t = static_cast<std::time_t>(s);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms - s * 1000));
    return std::string(buf);
  };
  std::int64_t const day_end = 1796601599000;  // 2026-12-06T23:59:59.000Z
  std::vector<std::int64_t> const instants{day_end,        day_end + 5,    day_end + 99,  day_end + 999,
                                           day_end + 1000, day_end + 1005, day_end + 999, day_end + 2000,
                                           0,              999,            -1,            -1000,
                                           -1001,          day_end + 5,    day_end + 5};
  for (auto const ms : instants) CHECK(log_timestamp(ms) == reference(ms));
  CHECK(log_timestamp(day_end + 1000) == "2026-12-07T00:00:00.000Z");
  CHECK(log_timestamp(-1) == "1969-12-31T23:59:59.999Z");
}

TEST_CASE("log: a LogLine writes each kind of value as JSON, escaped where needed, of any length") {
  // stderr is pointed at a file for the length of the test: the request log's
  // sink writes to file descriptor 2.
  char path[] = "/tmp/idemgate-logline-XXXXXX";
  int const file = ::mkstemp(path);
  REQUIRE(file >= 0);
  ::unlink(path);
  log_flush();
  int const saved = ::dup(STDERR_FILENO);
  REQUIRE(saved >= 0);
  REQUIRE(::dup2(file, STDERR_FILENO) == STDERR_FILENO);
  std::string const long_value(5000, 'x');  // past the per-thread buffer's first size
  auto const now_ms = [] {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  };
  auto const before = now_ms();
  for (int i = 0; i < 2; ++i) {             // the second line reuses the grown buffer
    LogLine line("request");
    line.add("plain", "GET")
        .add("escaped", std::string_view("a\"b\\c\nd\x01\xc3\xa9", 10))
        .add("long", long_value)
        .add("max", std::uint64_t{18446744073709551615u})
        .add("min", std::int64_t{-9223372036854775807 - 1})
        .add("zero", 0u)
        .add("yes", true)
        .add("no", false)
        .add_null("nothing");
    line.emit();
  }
  auto const after = now_ms();
  log_flush();
  REQUIRE(::dup2(saved, STDERR_FILENO) == STDERR_FILENO);
  ::close(saved);
  REQUIRE(::lseek(file, 0, SEEK_SET) == 0);
  auto const lines = lines_of(read_all(file));
  ::close(file);
  REQUIRE(lines.size() == 2);
  for (auto const& text : lines) {
    auto const v = boost::json::parse(text).as_object();
    CHECK(v.at("event").as_string() == "request");
    std::string const ts(v.at("ts").as_string());
    REQUIRE(std::regex_match(ts, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
    // The instant it names, to the millisecond, is when the line was made.
    std::tm tm{};
    REQUIRE(::strptime(ts.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) != nullptr);
    auto const at = static_cast<std::int64_t>(::timegm(&tm)) * 1000 + std::stoi(ts.substr(20, 3));
    CHECK(at >= before);
    CHECK(at <= after);
    CHECK(v.at("plain").as_string() == "GET");
    CHECK(std::string(v.at("escaped").as_string()) == std::string("a\"b\\c\nd\x01\xc3\x83\xc2\xa9"));
    CHECK(v.at("long").as_string() == long_value);
    CHECK(v.at("max").as_uint64() == 18446744073709551615u);
    CHECK(v.at("min").as_int64() == -9223372036854775807 - 1);
    CHECK(v.at("zero").as_int64() == 0);
    CHECK(v.at("yes").as_bool());
    CHECK_FALSE(v.at("no").as_bool());
    CHECK(v.at("nothing").is_null());
    CHECK(v.size() == 11);
  }
}
