// Parsing of the scalar forms the config file uses besides plain strings and
// numbers: durations ("250ms", "1h30m"), sizes ("64KiB") and "host:port"
// endpoints. Pure functions that return an error message instead of throwing.
#pragma once

#include "config/config.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

namespace idemgate::config {

// Either the parsed value or a message that says what was wrong.
template <class T>
using Parsed = std::variant<T, std::string>;

// One or more <integer><unit> groups, unit one of ms, s, m, h, d.
Parsed<Duration> parse_duration(std::string_view text);

// <integer> bytes, or <integer><unit> with unit B, KiB, MiB, GiB (binary) or
// KB, MB, GB (decimal).
Parsed<std::uint64_t> parse_size(std::string_view text);

// "host:port" or "[v6-address]:port"; port 0 means "any free port".
Parsed<Endpoint> parse_endpoint(std::string_view text);

// Levenshtein distance, for "did you mean ...?" suggestions.
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace idemgate::config
