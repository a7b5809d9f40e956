// Answers to MCP tools/call requests in the requester's own terms (sans-I/O):
// a replay carries the requester's JSON-RPC id (JSON or text/event-stream)
// and never another session's Mcp-Session-Id; a refusal is a tool result
// with isError: true whose text the model reads and whose structuredContent
// is the escalation package; a captured answer is classified from the
// JSON-RPC message inside it.
#pragma once

#include "policy/tool.hpp"
#include "proxy/problem.hpp"

#include <boost/json/value.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace idemgate::proxy {

// The JSON-RPC response message (an object with result or error) in an
// answer body: the body itself for application/json, the first such data
// event for text/event-stream. nullopt when there is none.
std::optional<boost::json::value> mcp_response_message(std::string_view content_type, std::string_view body);

// The typed class of an MCP answer from the message inside it (see
// policy/mcp.hpp); nullopt when the body holds no JSON-RPC response, and
// the HTTP status decides.
std::optional<policy::AnswerClass> classify_mcp_answer(std::string_view content_type, std::string_view body,
                                                       const policy::Tool& tool);

// A stored answer as this requester must see it: every JSON-RPC response
// carries `id`. A stream keeps only its response events and loses its event
// ids and retry hints: they belonged to the first requester's stream
// (notifications about the first request mean nothing to a re-issue).
// A body that is not a JSON-RPC response is returned unchanged.
std::string mcp_replay_body(std::string_view content_type, std::string_view body, const boost::json::value& id);

// Response headers tied to the session that first got the answer: dropped
// from replays (Mcp-Session-Id).
bool is_mcp_session_header(std::string_view name) noexcept;

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// A stored answer made this requester's: its JSON-RPC id (mcp_replay_body),
// no session header of the first requester, the requester's own
// Mcp-Session-Id when it sent one.
void shape_mcp_replay(HeaderList& headers, std::string& body, const boost::json::value& id,
                      std::string_view requester_session);

// A refusal as the MCP client's tool result: {"jsonrpc":"2.0","id":id,
// "result":{"content":[{"type":"text","text":...}],"structuredContent":
// <package>,"isError":true}}. The text states the reason, the question for
// a human, the key and attempts/bound.
std::string mcp_refusal_body(const Problem& p, const boost::json::value& id);

// 400 for Mcp-Method / Mcp-Name headers that disagree with the body
// (SEP-2243): a JSON-RPC error -32001 whose data is the problem.
std::string mcp_error_body(const Problem& p, const boost::json::value& id, int code);

}  // namespace idemgate::proxy
