// MCP tools/call: matching by headers or body, the fingerprint (name and
// arguments, never id or _meta), and JSON-RPC answer classes. Tables.
#include "policy/fingerprint.hpp"
#include "policy/match.hpp"
#include "policy/mcp.hpp"

#include <boost/json/parse.hpp>
#include <doctest/doctest.h>

#include <vector>

using namespace idemgate::policy;
namespace json = boost::json;

namespace {

std::string call_body(std::string_view id, std::string_view name, std::string_view arguments,
                      std::string_view extra_params = "") {
  std::string b = R"({"jsonrpc":"2.0","id":)" + std::string(id) + R"(,"method":"tools/call","params":{"name":")" +
                  std::string(name) + "\"";
  if (!arguments.empty()) b += R"(,"arguments":)" + std::string(arguments);
  if (!extra_params.empty()) b += "," + std::string(extra_params);
  return b + "}}";
}

Tool mcp_tool(std::string name) {
  Tool t;
  t.name = "mcp." + name;
  t.effect = Effect::write;
  t.match.host = "mcp.test";
  t.match.method = "POST";
  t.match.path = "/mcp";
  t.match.mcp_tool = std::move(name);
  return t;
}

std::string fp(const Tool& tool, std::string_view body) {
  FingerprintInput in;
  in.method = "POST";
  in.host = "mcp.test";
  in.target = "/mcp";
  in.content_type = "application/json";
  in.body = body;
  return fingerprint(in, tool).hex;
}

}  // namespace

TEST_CASE("inspect: tools/call named by the body, the headers, or both when they agree") {
  struct Row {
    const char* what;
    std::vector<Header> headers;
    std::string body;
    McpKind kind;
    const char* method;
    const char* tool;
    bool body_read;
  };
  std::string const call = call_body("7", "create_ticket", R"({"title":"x"})");
  std::vector<Row> const rows = {
      {"body only (2025-06-18, 2025-11-25)", {}, call, McpKind::tools_call, "tools/call", "create_ticket", true},
      {"headers and body (2026-07-28)", {{"Mcp-Method", "tools/call"}, {"Mcp-Name", "create_ticket"}}, call,
       McpKind::tools_call, "tools/call", "create_ticket", true},
      {"header names are case-insensitive", {{"mcp-method", "tools/call"}, {"MCP-NAME", "create_ticket"}}, call,
       McpKind::tools_call, "tools/call", "create_ticket", true},
      {"headers only: the body is not readable JSON", {{"Mcp-Method", "tools/call"}, {"Mcp-Name", "create_ticket"}},
       "{not json", McpKind::tools_call, "tools/call", "create_ticket", false},
      {"headers only: no body", {{"Mcp-Method", "tools/call"}, {"Mcp-Name", "create_ticket"}}, "",
       McpKind::tools_call, "tools/call", "create_ticket", false},
      {"Mcp-Name disagrees with the body", {{"Mcp-Method", "tools/call"}, {"Mcp-Name", "read_only"}}, call,
       McpKind::header_mismatch, "tools/call", "create_ticket", true},
      {"Mcp-Method disagrees with the body", {{"Mcp-Method", "tools/list"}}, call, McpKind::header_mismatch,
       "tools/call", "create_ticket", true},
      {"another method", {{"Mcp-Method", "tools/list"}}, R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})",
       McpKind::other, "tools/list", "", true},
      {"resources/read names a uri, but is no tool call", {},
       R"({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///x"}})", McpKind::other,
       "resources/read", "", true},
      {"tools/call without a name", {}, R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}})",
       McpKind::other, "tools/call", "", true},
      {"not JSON-RPC at all", {}, R"({"amount":5})", McpKind::not_mcp, "", "", false},
      {"a batch (no longer in the protocol) is its own kind, refused at MCP tools", {}, "[" + call + "]", McpKind::batch, "", "",
       false},
      {"a member named twice: which tool depends on the reader, refused at MCP tools", {},
       R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"delete_all","arguments":{},"name":"create_ticket"}})",
       McpKind::repeated_names, "", "", false},
      {"a member named twice anywhere, arguments too", {{"Mcp-Method", "tools/call"}, {"Mcp-Name", "create_ticket"}},
       R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_ticket","arguments":{"t":1,"t":2}}})",
       McpKind::repeated_names, "", "", false},
  };
  for (auto const& row : rows) {
    CAPTURE(row.what);
    auto const r = inspect_mcp_request(row.headers, row.body);
    CHECK(r.kind == row.kind);
    CHECK(r.method == row.method);
    CHECK(r.tool == row.tool);
    CHECK(r.body_read == row.body_read);
    if (row.kind == McpKind::header_mismatch) CHECK_FALSE(r.mismatch.empty());
  }
  CHECK(inspect_mcp_request({}, call).id == json::value(7));
  // A body this parser cannot read is flagged whatever the headers say; a
  // readable one, or none, is not.
  std::vector<Header> const named{{"Mcp-Method", "tools/call"}, {"Mcp-Name", "create_ticket"}};
  for (std::string_view body : {"{not json", R"({"id":1,"method":"tools/call","params":{"n":NaN}})",
                                "\xef\xbb\xbf{\"id\":1}", "{\"a\":\"\xff\"}"}) {
    CAPTURE(body);
    CHECK(inspect_mcp_request(named, body).unreadable);
  }
  std::string deep = call_body("1", "create_ticket", std::string(40, '[') + std::string(40, ']'));
  CHECK(inspect_mcp_request({}, deep).unreadable);
  CHECK(inspect_mcp_request({}, deep).kind == McpKind::not_mcp);
  CHECK_FALSE(inspect_mcp_request({}, call).unreadable);
  CHECK_FALSE(inspect_mcp_request(named, "").unreadable);
  // The refusal answers the call's id.
  CHECK(inspect_mcp_request({}, R"({"id":"r1","method":"tools/call","method":"tools/list"})").id == json::value("r1"));
  CHECK(inspect_mcp_request({}, call_body(R"("abc")", "t", "{}")).id == json::value("abc"));
}

TEST_CASE("matching: an MCP tool is matched by the name from the headers or the body") {
  auto compiled = ToolTable::compile({mcp_tool("create_ticket"), mcp_tool("list_tickets")});
  REQUIRE(compiled.ties.empty());
  auto match_with = [&](std::vector<Header> headers, std::string body) -> std::string {
    auto const r = inspect_mcp_request(headers, body);
    MatchRequest m;
    m.method = "POST";
    m.host = "mcp.test";
    m.path = "/mcp";
    m.mcp_tool = r.kind == McpKind::tools_call ? std::string_view(r.tool) : std::string_view();
    auto const* t = compiled.table->match(m);
    return t ? t->name : "";
  };
  CHECK(match_with({}, call_body("1", "create_ticket", "{}")) == "mcp.create_ticket");
  CHECK(match_with({{"Mcp-Method", "tools/call"}, {"Mcp-Name", "list_tickets"}}, "") == "mcp.list_tickets");
  CHECK(match_with({}, call_body("1", "unknown_tool", "{}")) == "");
  CHECK(match_with({}, R"({"jsonrpc":"2.0","id":1,"method":"initialize"})") == "");
}

TEST_CASE("fingerprint: params.name + canonical arguments, never id, _meta or key order") {
  auto const tool = mcp_tool("create_ticket");
  std::string const base = fp(tool, call_body("1", "create_ticket", R"({"title":"x","n":1})"));
  struct Row {
    const char* what;
    std::string body;
    bool same;
  };
  std::vector<Row> const rows = {
      {"a new numeric id", call_body("2", "create_ticket", R"({"title":"x","n":1})"), true},
      {"a string id", call_body(R"("re-issue-9")", "create_ticket", R"({"title":"x","n":1})"), true},
      {"argument keys reordered, number spelled 1.0", call_body("3", "create_ticket", R"({"n":1.0,"title":"x"})"),
       true},
      {"params._meta (progress token) added", call_body("4", "create_ticket", R"({"title":"x","n":1})",
                                                        R"("_meta":{"progressToken":42})"),
       true},
      {"jsonrpc members reordered",
       R"({"params":{"arguments":{"title":"x","n":1},"name":"create_ticket"},"method":"tools/call","id":5,"jsonrpc":"2.0"})",
       true},
      {"another argument value", call_body("1", "create_ticket", R"({"title":"y","n":1})"), false},
      {"an extra argument", call_body("1", "create_ticket", R"({"title":"x","n":1,"p":true})"), false},
  };
  for (auto const& row : rows) {
    CAPTURE(row.what);
    CHECK((fp(tool, row.body) == base) == row.same);
  }
  // No arguments and empty arguments are the same call.
  CHECK(fp(tool, call_body("1", "create_ticket", "")) == fp(tool, call_body("2", "create_ticket", "{}")));
  // fingerprint.ignore still applies, with pointers into the whole body.
  auto ignoring = tool;
  ignoring.fingerprint.ignore = {"/params/arguments/request_id"};
  CHECK(fp(ignoring, call_body("1", "create_ticket", R"({"title":"x","request_id":"a"})")) ==
        fp(ignoring, call_body("2", "create_ticket", R"({"title":"x","request_id":"b"})")));
}

TEST_CASE("mcp_call_material: only tools/call bodies have one") {
  CHECK(mcp_call_material(json::parse(call_body("1", "t", R"({"a":1})"))));
  CHECK_FALSE(mcp_call_material(json::parse(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})")));
  CHECK_FALSE(mcp_call_material(json::parse(R"([1,2])")));
  // The name is length-prefixed: a name cannot run into the arguments.
  CHECK(*mcp_call_material(json::parse(call_body("1", "a", R"({"b":1})"))) !=
        *mcp_call_material(json::parse(call_body("1", "a\\n{", R"({"b":1})"))));
}

TEST_CASE("answer classes of JSON-RPC messages") {
  auto write = mcp_tool("create_ticket");
  auto unhonoured = write;
  unhonoured.idempotency.honoured = false;
  auto read = write;
  read.effect = Effect::read;
  struct Row {
    const char* message;
    const Tool* tool;
    std::optional<AnswerClass> expected;
  };
  std::vector<Row> const rows = {
      {R"({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}]}})", &write, AnswerClass::ok},
      {R"({"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}})", &write, AnswerClass::ok},
      {R"({"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}})", &write, AnswerClass::validation},
      {R"({"jsonrpc":"2.0","id":1,"error":{"code":-32700,"message":"parse"}})", &write, AnswerClass::validation},
      {R"({"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"invalid"}})", &write, AnswerClass::validation},
      {R"({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"params"}})", &write, AnswerClass::validation},
      {R"({"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"header mismatch"}})", &write,
       AnswerClass::validation},
      {R"({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no method"}})", &write, AnswerClass::not_found},
      {R"({"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"no resource"}})", &write, AnswerClass::not_found},
      {R"({"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"internal"}})", &write, AnswerClass::transient},
      {R"({"jsonrpc":"2.0","id":1,"error":{"code":-32050,"message":"server"}})", &read, AnswerClass::transient},
      {R"({"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"internal"}})", &unhonoured, AnswerClass::unknown},
      {R"({"jsonrpc":"2.0","id":1,"error":{"code":42,"message":"app"}})", &write, AnswerClass::unclassified},
      {R"({"jsonrpc":"2.0","id":1,"error":{"message":"no code"}})", &write, AnswerClass::unclassified},
      {R"({"jsonrpc":"2.0","method":"notifications/progress"})", &write, std::nullopt},
      {R"("text")", &write, std::nullopt},
  };
  for (auto const& row : rows) {
    CAPTURE(row.message);
    CHECK(classify_mcp_message(json::parse(row.message), *row.tool) == row.expected);
  }
}
