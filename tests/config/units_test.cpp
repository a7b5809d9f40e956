// Durations, sizes, endpoints and the edit distance behind "did you mean".
#include "config/units.hpp"

#include <doctest/doctest.h>

using namespace idemgate::config;
using namespace std::chrono_literals;

TEST_CASE("durations in every unit and in compound form") {
  CHECK(std::get<Duration>(parse_duration("250ms")) == 250ms);
  CHECK(std::get<Duration>(parse_duration("15s")) == 15s);
  CHECK(std::get<Duration>(parse_duration("15m")) == 15min);
  CHECK(std::get<Duration>(parse_duration("24h")) == 24h);
  CHECK(std::get<Duration>(parse_duration("1d")) == 24h);
  CHECK(std::get<Duration>(parse_duration("1h30m")) == 90min);
}

TEST_CASE("bad durations say what is wrong") {
  for (const char* text : {"", "15", "15x", "s", "-1s", "1.5s", "99999999999999999999h"})
    CHECK_MESSAGE(std::holds_alternative<std::string>(parse_duration(text)), text);
  CHECK(std::get<std::string>(parse_duration("15")).find("needs a unit") != std::string::npos);
}

TEST_CASE("sizes binary, decimal and plain bytes") {
  CHECK(std::get<std::uint64_t>(parse_size("64KiB")) == 64 * 1024);
  CHECK(std::get<std::uint64_t>(parse_size("1MiB")) == 1024 * 1024);
  CHECK(std::get<std::uint64_t>(parse_size("2GiB")) == 2ull << 30);
  CHECK(std::get<std::uint64_t>(parse_size("4096")) == 4096);
  CHECK(std::get<std::uint64_t>(parse_size("10KB")) == 10000);
  for (const char* text : {"", "KiB", "1 MiB", "1mib", "1TiB", "-1"})
    CHECK_MESSAGE(std::holds_alternative<std::string>(parse_size(text)), text);
}

TEST_CASE("endpoints host:port and [v6]:port") {
  const auto v4 = std::get<Endpoint>(parse_endpoint("127.0.0.1:8080"));
  CHECK(v4.host == "127.0.0.1");
  CHECK(v4.port == 8080);
  const auto v6 = std::get<Endpoint>(parse_endpoint("[::1]:0"));
  CHECK(v6.host == "::1");
  CHECK(v6.port == 0);
  for (const char* text : {"127.0.0.1", ":80", "host:", "host:65536", "::1:80", "host:x"})
    CHECK_MESSAGE(std::holds_alternative<std::string>(parse_endpoint(text)), text);
}

TEST_CASE("edit distance") {
  CHECK(edit_distance("efect", "effect") == 1);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
}
