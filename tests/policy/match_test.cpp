// The matcher: each precedence rule, ties, MCP tool names.
#include "policy/match.hpp"

#include <doctest/doctest.h>

using namespace idemgate::policy;

namespace {

Tool make_tool(std::string name, std::string host, std::string method, std::string path,
               std::string mcp = "", std::uint16_t port = 0) {
  Tool tool;
  tool.name = std::move(name);
  tool.match = {std::move(host), port, std::move(method), std::move(path), std::move(mcp), {}};
  return tool;
}

MatchRequest request(std::string_view method, std::string_view host, std::string_view path,
                     std::string_view mcp = "", std::uint16_t port = 443) {
  return {.method = method, .host = host, .port = port, .path = path, .query = "", .mcp_tool = mcp};
}

std::string matched(const ToolTable& table, const MatchRequest& request) {
  const auto* tool = table.match(request);
  return tool ? tool->name : "none";
}

std::shared_ptr<const ToolTable> compile_without_ties(std::vector<Tool> tools) {
  auto compiled = ToolTable::compile(std::move(tools));
  REQUIRE(compiled.ties.empty());
  return compiled.table;
}

}  // namespace

TEST_CASE("path patterns: exact, prefix and {param} segments") {
  CHECK(path_matches("/v1/charges", "/v1/charges"));
  CHECK_FALSE(path_matches("/v1/charges", "/v1/charges/"));
  CHECK(path_matches("/v1/*", "/v1/anything/at/all"));
  CHECK_FALSE(path_matches("/v1/*", "/v2/x"));
  CHECK(path_matches("/v1/customers/{id}", "/v1/customers/cus_1"));
  CHECK_FALSE(path_matches("/v1/customers/{id}", "/v1/customers/"));
  CHECK_FALSE(path_matches("/v1/customers/{id}", "/v1/customers/a/b"));
  CHECK(path_matches("/v1/{kind}/{id}/sources", "/v1/customers/c/sources"));
  CHECK(path_matches("", "/whatever"));
}

TEST_CASE("exact host beats a glob, which beats any host") {
  const auto table = compile_without_ties({
      make_tool("any", "*", "POST", "/v1/charges"),
      make_tool("glob", "*.stripe.com", "POST", "/v1/charges"),
      make_tool("deep_glob", "*.eu.stripe.com", "POST", "/v1/charges"),
      make_tool("exact", "api.stripe.com", "POST", "/v1/charges"),
  });
  CHECK(matched(*table, request("POST", "API.Stripe.com.", "/v1/charges")) == "exact");
  CHECK(matched(*table, request("POST", "files.stripe.com", "/v1/charges")) == "glob");
  CHECK(matched(*table, request("POST", "x.eu.stripe.com", "/v1/charges")) == "deep_glob");
  CHECK(matched(*table, request("POST", "stripe.com", "/v1/charges")) == "any");
  CHECK(matched(*table, request("POST", "example.org", "/v1/charges")) == "any");
}

TEST_CASE("exact path beats {param} segments, which beat a prefix") {
  const auto table = compile_without_ties({
      make_tool("prefix", "api.example.com", "", "/v1/*"),
      make_tool("longer_prefix", "api.example.com", "", "/v1/customers/*"),
      make_tool("param", "api.example.com", "", "/v1/customers/{id}"),
      make_tool("exact", "api.example.com", "", "/v1/customers/search"),
      make_tool("host_only", "api.example.com", "", ""),
  });
  CHECK(matched(*table, request("GET", "api.example.com", "/v1/customers/search")) == "exact");
  CHECK(matched(*table, request("GET", "api.example.com", "/v1/customers/cus_1")) == "param");
  CHECK(matched(*table, request("GET", "api.example.com", "/v1/customers/cus_1/x")) == "longer_prefix");
  CHECK(matched(*table, request("GET", "api.example.com", "/v1/charges")) == "prefix");
  CHECK(matched(*table, request("GET", "api.example.com", "/v2")) == "host_only");
  CHECK(matched(*table, request("GET", "other.example.com", "/v1/charges")) == "none");
}

TEST_CASE("a given method beats any method, a method mismatch does not match") {
  const auto table = compile_without_ties({
      make_tool("any_method", "api.example.com", "", "/v1/charges"),
      make_tool("post", "api.example.com", "POST", "/v1/charges"),
  });
  CHECK(matched(*table, request("POST", "api.example.com", "/v1/charges")) == "post");
  CHECK(matched(*table, request("GET", "api.example.com", "/v1/charges")) == "any_method");
}

TEST_CASE("an MCP tool name beats the plain endpoint, port narrows") {
  const auto table = compile_without_ties({
      make_tool("mcp_endpoint", "mcp.example.com", "POST", "/mcp"),
      make_tool("create_issue", "mcp.example.com", "POST", "/mcp", "create_issue"),
      make_tool("on_8443", "mcp.example.com", "POST", "/mcp", "", 8443),
  });
  CHECK(matched(*table, request("POST", "mcp.example.com", "/mcp", "create_issue")) == "create_issue");
  CHECK(matched(*table, request("POST", "mcp.example.com", "/mcp", "list_issues")) == "mcp_endpoint");
  CHECK(matched(*table, request("POST", "mcp.example.com", "/mcp", "", 8443)) == "on_8443");
}

TEST_CASE("equally specific tools that can match one request are a tie") {
  const auto same = ToolTable::compile({make_tool("a", "x.com", "POST", "/v1"), make_tool("b", "x.com", "POST", "/v1")});
  REQUIRE(same.ties.size() == 1);
  CHECK(same.ties[0].first == 0);
  CHECK(same.ties[0].second == 1);
  CHECK(same.ties[0].message.find("'b' ties with tool 'a'") != std::string::npos);

  const auto crossed_params = ToolTable::compile(
      {make_tool("a", "x.com", "GET", "/v1/{a}/x"), make_tool("b", "x.com", "GET", "/v1/y/{b}")});
  CHECK(crossed_params.ties.size() == 1);

  const auto disjoint = ToolTable::compile({make_tool("a", "x.com", "POST", "/v1/{id}/x"),
                                            make_tool("b", "x.com", "POST", "/v1/{id}/y"),
                                            make_tool("c", "x.com", "GET", "/v1/{id}/x"),
                                            make_tool("d", "y.com", "POST", "/v1/{id}/x")});
  CHECK(disjoint.ties.empty());
}

TEST_CASE("mcp_tool_name reads params.name of a tools/call request only") {
  CHECK(mcp_tool_name(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{}}})") ==
        std::optional<std::string>("create_issue"));
  CHECK_FALSE(mcp_tool_name(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})"));
  CHECK_FALSE(mcp_tool_name(R"({"method":"tools/call","params":{"name":7}})"));
  CHECK_FALSE(mcp_tool_name(R"([{"method":"tools/call","params":{"name":"x"}}])"));
  CHECK_FALSE(mcp_tool_name("{not json"));
  CHECK_FALSE(mcp_tool_name(""));
}

TEST_CASE("query conditions: decoded comparison, more conditions win, conflicting values never tie") {
  auto with_query = [](std::string name, std::vector<std::string> query) {
    auto tool = make_tool(std::move(name), "api.example.com", "GET", "/v1/items");
    tool.match.query = std::move(query);
    return tool;
  };
  const auto table = compile_without_ties({
      with_query("plain", {}),
      with_query("expanded", {"expand"}),
      with_query("expanded_customer", {"expand", "type=customer card"}),
      with_query("other_type", {"type=invoice", "limit"}),
  });
  auto at = [](std::string_view query) {
    auto r = request("GET", "api.example.com", "/v1/items");
    r.query = query;
    return r;
  };
  CHECK(matched(*table, at("")) == "plain");
  CHECK(matched(*table, at("expand=1")) == "expanded");
  CHECK(matched(*table, at("type=customer+card&expand")) == "expanded_customer");
  CHECK(matched(*table, at("expand&type=customer%20card")) == "expanded_customer");
  CHECK(matched(*table, at("type=invoice&limit=5")) == "other_type");
  CHECK(matched(*table, at("type=invoice")) == "plain");
  CHECK(matched(*table, at("type=invoiceX")) == "plain");

  CHECK(query_matches("a=x y", "b=1&a=x+y"));
  CHECK(query_matches("a", "a"));
  CHECK_FALSE(query_matches("a=1", "a"));
  CHECK_FALSE(query_matches("a", "ab=1"));

  const auto tie = ToolTable::compile({with_query("a", {"x=1"}), with_query("b", {"y=2"})});
  CHECK(tie.ties.size() == 1);  // ?x=1&y=2 matches both
}
