// SSE parsing and writing (see sse.hpp).
#include "proxy/sse.hpp"

#include "policy/headers.hpp"

namespace idemgate::proxy {

namespace {

struct Pending {
  SseEvent event;
  bool has_data = false;
  bool touched = false;
};

void field(Pending& p, std::string_view line) {
  if (line.empty() || line.front() == ':') return;
  auto const colon = line.find(':');
  std::string_view name = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  p.touched = true;
  if (name == "data") {
    if (p.has_data) p.event.data += '\n';
    p.event.data += value;
    p.has_data = true;
  } else if (name == "event") {
    p.event.event = std::string(value);
  } else if (name == "id") {
    p.event.id = std::string(value);
  } else if (name == "retry") {
    p.event.retry = std::string(value);
  }
}

}  // namespace

std::vector<SseEvent> parse_sse(std::string_view stream) {
  std::vector<SseEvent> out;
  if (stream.starts_with("\xEF\xBB\xBF")) stream.remove_prefix(3);
  Pending p;
  auto dispatch = [&] {
    if (p.has_data) out.push_back(std::move(p.event));
    p = Pending{};
  };
  std::size_t i = 0;
  while (i < stream.size()) {
    std::size_t end = i;
    while (end < stream.size() && stream[end] != '\n' && stream[end] != '\r') ++end;
    std::string_view const line = stream.substr(i, end - i);
    if (end < stream.size() && stream[end] == '\r' && end + 1 < stream.size() && stream[end + 1] == '\n')
      i = end + 2;
    else
      i = end + 1;
    if (line.empty())
      dispatch();
    else
      field(p, line);
  }
  dispatch();
  return out;
}

std::string serialize_sse(const std::vector<SseEvent>& events) {
  std::string out;
  for (auto const& e : events) {
    if (!e.event.empty()) out += "event: " + e.event + "\n";
    if (e.id) out += "id: " + *e.id + "\n";
    if (e.retry) out += "retry: " + *e.retry + "\n";
    std::size_t start = 0;
    for (;;) {
      auto const nl = e.data.find('\n', start);
      out += "data: ";
      out.append(e.data, start, nl == std::string::npos ? std::string::npos : nl - start);
      out += '\n';
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
    out += '\n';
  }
  return out;
}

bool is_event_stream(std::string_view content_type) noexcept {
  return policy::iequals(policy::media_type(content_type), "text/event-stream");
}

}  // namespace idemgate::proxy
