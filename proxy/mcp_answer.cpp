// MCP answer shaping (see mcp_answer.hpp).
#include "proxy/mcp_answer.hpp"

#include "policy/headers.hpp"
#include "policy/mcp.hpp"
#include "proxy/sse.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace idemgate::proxy {

namespace json = boost::json;

namespace {

bool is_response(const json::value& v) {
  return v.is_object() && (v.get_object().contains("result") || v.get_object().contains("error"));
}

std::optional<json::value> parse_response(std::string_view text) {
  boost::system::error_code ec;
  auto v = json::parse(text, ec);
  if (ec || !is_response(v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<json::value> mcp_response_message(std::string_view content_type, std::string_view body) {
  if (!is_event_stream(content_type)) return parse_response(body);
  for (auto const& e : parse_sse(body)) {
    if (!e.event.empty() && e.event != "message") continue;
    if (auto v = parse_response(e.data)) return v;
  }
  return std::nullopt;
}

std::optional<policy::AnswerClass> classify_mcp_answer(std::string_view content_type, std::string_view body,
                                                       const policy::Tool& tool) {
  auto const message = mcp_response_message(content_type, body);
  if (!message) return std::nullopt;
  return policy::classify_mcp_message(*message, tool);
}

std::string mcp_replay_body(std::string_view content_type, std::string_view body, const json::value& id) {
  if (!is_event_stream(content_type)) {
    auto v = parse_response(body);
    if (!v) return std::string(body);
    v->get_object()["id"] = id;
    return json::serialize(*v);
  }
  std::vector<SseEvent> kept;
  for (auto& e : parse_sse(body)) {
    if (!e.event.empty() && e.event != "message") continue;
    auto v = parse_response(e.data);
    if (!v) continue;
    v->get_object()["id"] = id;
    SseEvent out;
    out.event = e.event;
    out.data = json::serialize(*v);
    kept.push_back(std::move(out));
  }
  if (kept.empty()) return std::string(body);
  return serialize_sse(kept);
}

bool is_mcp_session_header(std::string_view name) noexcept { return policy::iequals(name, "Mcp-Session-Id"); }

void shape_mcp_replay(HeaderList& headers, std::string& body, const json::value& id,
                      std::string_view requester_session) {
  std::string content_type;
  for (auto const& [name, value] : headers)
    if (policy::iequals(name, "Content-Type")) content_type = value;
  body = mcp_replay_body(content_type, body, id);
  std::erase_if(headers, [](const auto& h) { return is_mcp_session_header(h.first); });
  if (!requester_session.empty()) headers.emplace_back("Mcp-Session-Id", std::string(requester_session));
}

std::string mcp_refusal_body(const Problem& p, const json::value& id) {
  std::string text = "idemgate refused this call (" + p.reason_code + "). " + problem_message(p);
  json::object result{
      {"content", json::array{json::object{{"type", "text"}, {"text", std::move(text)}}}},
      {"structuredContent", problem_object(p)},
      {"isError", true},
  };
  json::object message{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
  return json::serialize(message);
}

std::string mcp_error_body(const Problem& p, const json::value& id, int code) {
  json::object error{{"code", code}, {"message", problem_message(p)}, {"data", problem_object(p)}};
  json::object message{{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(error)}};
  return json::serialize(message);
}

}  // namespace idemgate::proxy
