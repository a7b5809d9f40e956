// MCP over Streamable HTTP (revisions 2025-06-18, 2025-11-25, 2026-07-28),
// the pure part: which tools/call a POST is (by the Mcp-Method / Mcp-Name
// headers of 2026-07-28 or by the JSON-RPC body), what of it makes the
// intent (params.name and canonical params.arguments: never the JSON-RPC id,
// which changes on every re-issue, nor params._meta), and the typed class of
// a JSON-RPC answer.
//
// Answer classes (docs/decisions.md, "MCP answers", keeps this table for users):
//   result without isError                       ok
//   result.isError: true (the tool's own failure) validation: not re-sent
//                                                 with the same arguments
//   error -32700 parse, -32600 invalid request,
//         -32602 invalid params, -32001 header
//         mismatch                               validation
//   error -32601 method not found, -32002
//         resource not found                     not_found
//   error -32603 internal, -32000..-32099 other
//         server errors                          transient; unknown for a
//                                                 write whose key the server
//                                                 does not honour (as a 5xx)
//   any other error code                         unclassified (fails closed)
#pragma once

#include "policy/headers.hpp"
#include "policy/tool.hpp"

#include <boost/json/value.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace idemgate::policy {

enum class McpKind {
  not_mcp,          // no JSON-RPC body and no Mcp-Method header
  other,            // a JSON-RPC message that is not tools/call (initialize, tools/list, ...)
  tools_call,       // a tools/call request: tool is set
  header_mismatch,  // Mcp-Method / Mcp-Name disagree with the body: refuse (400, JSON-RPC -32001)
  batch,            // a JSON array of messages: no longer in MCP (2025-06-18 removed batching)
  repeated_names,   // an object in the body names a member twice: which tool it calls depends on the reader
};

struct McpRequest {
  McpKind kind = McpKind::not_mcp;
  std::string method;  // JSON-RPC method (from the body, else Mcp-Method)
  std::string tool;    // params.name (from the body, else Mcp-Name)
  boost::json::value id;  // the request's JSON-RPC id; null when absent or the body is unreadable
  bool body_read = false;  // the body parsed as one JSON-RPC message
  // A body was given and is not JSON this parser reads (NaN, a BOM, nesting
  // past 32): a laxer server may still run it, so where an MCP tool is, the
  // headers alone do not decide (the proxy refuses it, JSON-RPC -32700).
  bool unreadable = false;
  std::string mismatch;    // what disagreed, for header_mismatch
};

// Reads the headers and, when it is given, the body. A body that does not
// parse leaves the headers to decide (body_read false). Never throws.
McpRequest inspect_mcp_request(HeaderView headers, std::string_view body) noexcept;

// The fingerprint material of a parsed tools/call body: params.name and the
// canonical form of params.arguments (absent and {} are the same call).
// nullopt when `body` is not a tools/call request.
std::optional<std::string> mcp_call_material(const boost::json::value& body);

// The class of one JSON-RPC response message (an object with result or
// error), per the table above; nullopt when it is neither.
std::optional<AnswerClass> classify_mcp_message(const boost::json::value& message, const Tool& tool) noexcept;

}  // namespace idemgate::policy
