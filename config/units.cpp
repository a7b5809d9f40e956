// Durations, sizes and endpoints as written in the config file.
#include "config/units.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <vector>

namespace idemgate::config {
namespace {

// Built piecewise: GCC 12 warns (-Wrestrict, a false positive) on "'" + s + "'".
std::string quote(std::string_view text) {
  std::string out(1, '\'');
  out += text;
  out += '\'';
  return out;
}


// Reads the leading run of digits of `text` into `value`; returns how many
// characters it used (0 when there is no number or it overflows).
std::size_t read_unsigned(std::string_view text, std::uint64_t& value) {
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{}) return 0;
  return static_cast<std::size_t>(ptr - text.data());
}

std::size_t unit_length(std::string_view text) {
  return static_cast<std::size_t>(
      std::find_if(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }) -
      text.begin());
}

bool multiply_checked(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  if (b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b) return false;
  out = a * b;
  return true;
}

}  // namespace

Parsed<Duration> parse_duration(std::string_view text) {
  const std::string quoted = quote(text);
  if (text.empty()) return "empty duration; write e.g. 250ms, 15s, 15m, 24h";
  std::uint64_t total_ms = 0;
  while (!text.empty()) {
    std::uint64_t number = 0;
    const auto digits = read_unsigned(text, number);
    if (digits == 0) return "bad duration " + quoted + "; write e.g. 250ms, 15s, 15m, 24h";
    text.remove_prefix(digits);
    const auto unit = text.substr(0, unit_length(text));
    std::uint64_t ms_per_unit = 0;
    if (unit == "ms") ms_per_unit = 1;
    else if (unit == "s") ms_per_unit = 1000;
    else if (unit == "m") ms_per_unit = 60'000;
    else if (unit == "h") ms_per_unit = 3'600'000;
    else if (unit == "d") ms_per_unit = 86'400'000;
    else if (unit.empty()) return "duration " + quoted + " needs a unit (ms, s, m, h, d)";
    else return "bad duration unit '" + std::string(unit) + "' in " + quoted + " (valid: ms, s, m, h, d)";
    std::uint64_t part = 0;
    if (!multiply_checked(number, ms_per_unit, part) || total_ms + part < total_ms)
      return "duration " + quoted + " is too large";
    total_ms += part;
    text.remove_prefix(unit.size());
  }
  if (total_ms > static_cast<std::uint64_t>(std::numeric_limits<Duration::rep>::max()))
    return "duration " + quoted + " is too large";
  return Duration(static_cast<Duration::rep>(total_ms));
}

Parsed<std::uint64_t> parse_size(std::string_view text) {
  const std::string quoted = quote(text);
  std::uint64_t number = 0;
  const auto digits = read_unsigned(text, number);
  if (digits == 0) return "bad size " + quoted + "; write e.g. 4096, 64KiB, 1MiB";
  const auto unit = text.substr(digits);
  struct Unit {
    std::string_view name;
    std::uint64_t bytes;
  };
  static constexpr Unit units[] = {{"", 1},         {"B", 1},           {"KiB", 1024},
                                   {"MiB", 1 << 20}, {"GiB", 1ull << 30}, {"KB", 1000},
                                   {"MB", 1'000'000}, {"GB", 1'000'000'000}};
  for (const auto& u : units) {
    if (u.name != unit) continue;
    std::uint64_t bytes = 0;
    if (!multiply_checked(number, u.bytes, bytes)) return "size " + quoted + " is too large";
    return bytes;
  }
  return "bad size unit '" + std::string(unit) + "' in " + quoted +
         " (valid: B, KiB, MiB, GiB, KB, MB, GB)";
}

Parsed<Endpoint> parse_endpoint(std::string_view text) {
  const std::string quoted = quote(text);
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return "bad address " + quoted + "; write host:port, e.g. 127.0.0.1:8080";
  std::string_view host = text.substr(0, colon);
  const auto port_text = text.substr(colon + 1);
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) return "bad IPv6 address in " + quoted;
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return "IPv6 address in " + quoted + " must be in brackets, e.g. [::1]:8080";
  }
  std::uint64_t port = 0;
  if (port_text.empty() || read_unsigned(port_text, port) != port_text.size() || port > 65535)
    return "bad port in " + quoted + " (0 to 65535)";
  return Endpoint{std::string(host), static_cast<std::uint16_t>(port)};
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace idemgate::config
