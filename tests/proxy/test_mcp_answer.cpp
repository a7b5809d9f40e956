// MCP answers: SSE round trips, replays with the requester's id, refusals as
// isError tool results, classification from the message inside.
#include "proxy/mcp_answer.hpp"
#include "proxy/sse.hpp"

#include <boost/json/parse.hpp>
#include <doctest/doctest.h>

using namespace idemgate;
using namespace idemgate::proxy;
namespace json = boost::json;

namespace {

constexpr char kSse[] =
    "event: message\r\n"
    "id: stream-1_0\r\n"
    "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1}}\r\n"
    "\r\n"
    ": a comment\n"
    "event: message\n"
    "id: stream-1_1\n"
    "data: {\"jsonrpc\":\"2.0\",\"id\":3,\n"
    "data: \"result\":{\"content\":[{\"type\":\"text\",\"text\":\"T-1\"}]}}\n"
    "\n";

policy::Tool write_tool() {
  policy::Tool t;
  t.name = "desk.create_ticket";
  t.effect = policy::Effect::write;
  t.match.mcp_tool = "create_ticket";
  return t;
}

}  // namespace

TEST_CASE("sse: events with CRLF or LF lines, comments, multi-line data, written back") {
  auto const events = parse_sse(kSse);
  REQUIRE(events.size() == 2);
  CHECK(events[0].event == "message");
  CHECK(events[0].id == "stream-1_0");
  CHECK(events[1].data == "{\"jsonrpc\":\"2.0\",\"id\":3,\n\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"T-1\"}]}}");
  auto const again = parse_sse(serialize_sse(events));
  REQUIRE(again.size() == 2);
  CHECK(again[1].data == events[1].data);
  CHECK(again[1].id == events[1].id);
  // A last event without its blank line was still captured whole.
  CHECK(parse_sse("data: x").size() == 1);
  CHECK(parse_sse("event: ping\n\n").empty());  // no data: not dispatched
  CHECK(is_event_stream("text/event-stream; charset=utf-8"));
  CHECK(is_event_stream("Text/Event-Stream"));
  CHECK_FALSE(is_event_stream("application/json"));
}

TEST_CASE("replay: JSON answers carry the requester's id") {
  std::string const stored = R"({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"T-1"}]}})";
  auto const out = json::parse(mcp_replay_body("application/json", stored, json::value(42)));
  CHECK(out.at("id") == 42);
  CHECK(out.at("result").at("content").at(0).at("text") == "T-1");
  auto const str = json::parse(mcp_replay_body("application/json", stored, json::value("req-b")));
  CHECK(str.at("id") == "req-b");
  // Not a JSON-RPC response: untouched.
  CHECK(mcp_replay_body("application/json", "{\"id\":\"ch_1\"}", json::value(7)) == "{\"id\":\"ch_1\"}");
}

TEST_CASE("replay: a stream keeps its response event, with the requester's id and no event ids") {
  auto const out = mcp_replay_body("text/event-stream", kSse, json::value(9));
  auto const events = parse_sse(out);
  REQUIRE(events.size() == 1);
  CHECK_FALSE(events[0].id);
  auto const message = json::parse(events[0].data);
  CHECK(message.at("id") == 9);
  CHECK(message.at("result").at("content").at(0).at("text") == "T-1");
}

TEST_CASE("replay: the first requester's session header never reaches another, the requester keeps its own") {
  HeaderList headers{{"Content-Type", "application/json"}, {"mcp-session-id", "session-of-a"}};
  std::string body = R"({"jsonrpc":"2.0","id":1,"result":{"content":[]}})";
  shape_mcp_replay(headers, body, json::value(2), "session-of-b");
  REQUIRE(headers.size() == 2);
  CHECK(headers[1] == std::pair<std::string, std::string>{"Mcp-Session-Id", "session-of-b"});
  CHECK(json::parse(body).at("id") == 2);
  HeaderList none{{"Content-Type", "application/json"}, {"Mcp-Session-Id", "session-of-a"}};
  shape_mcp_replay(none, body, json::value(3), "");
  CHECK(none.size() == 1);
}

TEST_CASE("the message inside an answer decides its class") {
  auto const tool = write_tool();
  CHECK(classify_mcp_answer("text/event-stream", kSse, tool) == policy::AnswerClass::ok);
  CHECK(classify_mcp_answer("application/json", R"({"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}})",
                            tool) == policy::AnswerClass::validation);
  CHECK(classify_mcp_answer("application/json", R"({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x"}})",
                            tool) == policy::AnswerClass::validation);
  CHECK_FALSE(classify_mcp_answer("application/json", "not json", tool));
  CHECK_FALSE(classify_mcp_answer("text/event-stream", "event: ping\ndata: {}\n\n", tool));
  CHECK(is_mcp_session_header("mcp-session-id"));
  CHECK_FALSE(is_mcp_session_header("Content-Type"));
}

TEST_CASE("a refusal is an isError tool result: text for the model, the package as structuredContent") {
  Problem p;
  p.status = 422;
  p.reason_code = "tool_outcome_unknown";
  p.title = "Refused: tool_outcome_unknown";
  p.detail = "the connection dropped after the request left";
  p.extra["terminal"] = "escalate";
  p.extra["question_for_human"] = "Check the provider and record the outcome.";
  p.extra["idempotency_key"] = "k-1";
  p.extra["attempts"] = 1;
  p.extra["bound"] = 2;
  auto const m = json::parse(mcp_refusal_body(p, json::value(5)));
  CHECK(m.at("jsonrpc") == "2.0");
  CHECK(m.at("id") == 5);
  auto const& r = m.at("result");
  CHECK(r.at("isError") == true);
  std::string const text(r.at("content").at(0).at("text").as_string());
  for (auto const* part : {"tool_outcome_unknown", "the connection dropped", "Check the provider", "k-1", "1/3"})
    CHECK_MESSAGE(text.find(part) != std::string::npos, part);
  CHECK(r.at("structuredContent").at("reason_code") == "tool_outcome_unknown");
  CHECK(r.at("structuredContent").at("error").at("code") == "tool_outcome_unknown");

  auto const e = json::parse(mcp_error_body(bad_request("Mcp-Name 'a' but the body names 'b'"), json::value(2), -32001));
  CHECK(e.at("error").at("code") == -32001);
  CHECK(e.at("error").at("data").at("reason_code") == "malformed_request");
}
