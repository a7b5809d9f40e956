// Server-Sent Events (text/event-stream) as MCP Streamable HTTP uses them:
// a captured stream parsed into events and written back. Sans-I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idemgate::proxy {

struct SseEvent {
  std::string event;  // empty: the default type ("message")
  std::string data;   // data lines joined with '\n'
  std::optional<std::string> id;
  std::optional<std::string> retry;
};

// Every dispatched event of the stream (lines ending in LF, CRLF or CR;
// comments skipped; an event with no data line is not dispatched, as the
// WHATWG parser does). A final event without its blank line is kept: the
// stream was captured whole.
std::vector<SseEvent> parse_sse(std::string_view stream);

// The events as a stream, each ended by a blank line; multi-line data is
// written as one data line per line.
std::string serialize_sse(const std::vector<SseEvent>& events);

bool is_event_stream(std::string_view content_type) noexcept;

}  // namespace idemgate::proxy
