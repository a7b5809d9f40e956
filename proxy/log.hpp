// One JSON object per line on stderr, each written with a single write(2) so
// lines from several threads never interleave. Never given a secret.
#pragma once

#include <boost/json/object.hpp>

#include <exception>
#include <string_view>

namespace idemgate::proxy {

// Adds "ts" (RFC 3339, UTC, milliseconds) and "event", then writes the line.
void log_event(std::string_view event, boost::json::object fields);

// Logs an exception that ended a coroutine (a co_spawn completion handler's
// argument) as "internal_error" with where it happened; null: nothing.
void log_exception(std::string_view where, std::exception_ptr e);

// Turns request logging off (benchmarks and tests that count lines set it).
void set_request_log_enabled(bool);
bool request_log_enabled() noexcept;

}  // namespace idemgate::proxy
