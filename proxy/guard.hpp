// The enforcement path for a request matched to a tool (SPEC section 2):
// inspect the body, fingerprint it, consult the ledger, decide, and then
// dispatch with the intent's key, replay, reconcile, hold or refuse, always
// answering with the Idemgate-* headers and persisting escalation packages
// before the answer is written.
#pragma once

#include "config/config.hpp"
#include "ledger/executor.hpp"
#include "policy/mcp.hpp"
#include "policy/tool.hpp"
#include "proxy/forward.hpp"
#include "proxy/http_rules.hpp"
#include "proxy/stream.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <optional>
#include <string>

namespace idemgate::proxy {

class Worker;

// body: the request body when the caller already read it (to match an MCP
// tool name); otherwise it is read here, up to limits.inspect_body. mcp: what
// the caller read of that body as an MCP message, when it did (an MCP tool
// matches only so); otherwise an MCP tool's call is read here.
Task<ForwardResult> guard_request(
    ProxyStream& client, boost::beast::flat_buffer& client_buffer,
    boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser, const Target& target,
    const policy::Tool& tool, const config::Config& cfg, Worker& worker, std::optional<std::string> body,
    std::optional<policy::McpRequest> mcp);

// Reads a whole request body into memory, up to limit bytes. Sends
// "100 Continue" first when the client asked for it. nullopt: over the limit
// (or the client failed); *too_large tells which.
Task<std::optional<std::string>> read_request_body(
    ProxyStream& client, boost::beast::flat_buffer& client_buffer,
    boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser, const config::Config& cfg,
    bool& too_large);

// Forwards a request whose body is already in memory, untouched by policy
// (an unmatched request that was read to look for an MCP tool name).
Task<ForwardResult> forward_buffered(
    ProxyStream& client, boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser,
    const Target& target, std::string body, const config::Config& cfg, Worker& worker);

}  // namespace idemgate::proxy
