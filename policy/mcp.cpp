// MCP request inspection, fingerprint material and answer classes (see mcp.hpp).
#include "policy/mcp.hpp"

#include "policy/fingerprint.hpp"
#include "policy/json_parse.hpp"


namespace idemgate::policy {

namespace json = boost::json;

namespace {

const json::string* string_member(const json::object& o, std::string_view key) {
  auto const* v = o.if_contains(key);
  return v && v->is_string() ? &v->get_string() : nullptr;
}

// The name a request is about: params.name (tools/call, prompts/get) or
// params.uri (resources/read), as Mcp-Name mirrors it.
std::string named(const json::object& request) {
  auto const* params = request.if_contains("params");
  if (!params || !params->is_object()) return {};
  if (auto const* n = string_member(params->get_object(), "name")) return std::string(*n);
  if (auto const* u = string_member(params->get_object(), "uri")) return std::string(*u);
  return {};
}

}  // namespace

McpRequest inspect_mcp_request(HeaderView headers, std::string_view body) noexcept {
  McpRequest out;
  try {
    auto const header_method = find_header(headers, "Mcp-Method");
    auto const header_name = find_header(headers, "Mcp-Name");
    if (!body.empty()) {
      boost::system::error_code ec;
      bool repeated_names = false;
      auto const value = parse_json(body, ec, &repeated_names);
      out.unreadable = static_cast<bool>(ec);
      if (!ec && value.is_array()) {
        out.kind = McpKind::batch;
        return out;
      }
      if (!ec && repeated_names) {
        // {"name":"delete_repo","name":"list_issues"}: the gate would match
        // one tool and a first-wins server run the other.
        out.kind = McpKind::repeated_names;
        if (value.is_object())
          if (auto const* id = value.get_object().if_contains("id")) out.id = *id;
        return out;
      }
      if (!ec && value.is_object()) {
        auto const& request = value.get_object();
        if (auto const* m = string_member(request, "method")) {
          out.body_read = true;
          out.method = std::string(*m);
          out.tool = named(request);
          if (auto const* id = request.if_contains("id")) out.id = *id;
        }
      }
    }
    if (!out.body_read) {
      if (!header_method) return out;
      out.method = std::string(*header_method);
      if (header_name) out.tool = std::string(*header_name);
    } else {
      // A gateway that trusts the headers and a server that runs the body
      // must never disagree on what is being called (SEP-2243).
      if (header_method && *header_method != out.method) {
        out.kind = McpKind::header_mismatch;
        out.mismatch = "Mcp-Method '" + std::string(*header_method) + "' but the body's method is '" + out.method + "'";
        return out;
      }
      if (header_name && !out.tool.empty() && *header_name != out.tool) {
        out.kind = McpKind::header_mismatch;
        out.mismatch = "Mcp-Name '" + std::string(*header_name) + "' but the body names '" + out.tool + "'";
        return out;
      }
    }
    if (out.method == "tools/call" && !out.tool.empty()) {
      out.kind = McpKind::tools_call;
    } else {
      out.kind = McpKind::other;
      if (out.method != "tools/call") out.tool.clear();
    }
  } catch (...) {
    out = McpRequest{};
  }
  return out;
}

std::optional<std::string> mcp_call_material(const json::value& body) {
  if (!body.is_object()) return std::nullopt;
  auto const& request = body.get_object();
  auto const* method = string_member(request, "method");
  if (!method || *method != "tools/call") return std::nullopt;
  auto const* params = request.if_contains("params");
  if (!params || !params->is_object()) return std::nullopt;
  auto const* name = string_member(params->get_object(), "name");
  if (!name) return std::nullopt;
  json::value arguments = json::object();
  if (auto const* a = params->get_object().if_contains("arguments"); a && !a->is_null()) arguments = *a;
  std::string material = "mcp tools/call\n";
  material += std::to_string(name->size()) + ":" + std::string(*name) + "\n";
  material += canonical_json(arguments);
  return material;
}

std::optional<AnswerClass> classify_mcp_message(const json::value& message, const Tool& tool) noexcept {
  if (!message.is_object()) return std::nullopt;
  auto const& m = message.get_object();
  if (auto const* result = m.if_contains("result")) {
    if (result->is_object()) {
      auto const* is_error = result->get_object().if_contains("isError");
      if (is_error && is_error->is_bool() && is_error->get_bool()) return AnswerClass::validation;
    }
    return AnswerClass::ok;
  }
  auto const* error = m.if_contains("error");
  if (!error || !error->is_object()) return std::nullopt;
  auto const* code_value = error->get_object().if_contains("code");
  if (!code_value || !(code_value->is_int64() || code_value->is_uint64())) return AnswerClass::unclassified;
  auto const code = code_value->is_int64() ? code_value->get_int64() : static_cast<std::int64_t>(-1);
  switch (code) {
    case -32700: case -32600: case -32602: case -32001: return AnswerClass::validation;
    case -32601: case -32002: return AnswerClass::not_found;
    default: break;
  }
  if (code == -32603 || (code <= -32000 && code >= -32099)) {
    // Like a 5xx: the server may have run part of the call.
    bool const write = tool.effect != Effect::read;
    return write && !tool.idempotency.honoured ? AnswerClass::unknown : AnswerClass::transient;
  }
  return AnswerClass::unclassified;
}

}  // namespace idemgate::policy
