// Which tool a request belongs to. Tools are compiled once, at config load,
// into an immutable ToolTable; match() is then a few hash lookups and a short
// scan, safe to call from any thread.
//
// Precedence, most specific wins, compared dimension by dimension in this
// order (the first dimension that differs decides):
//   1. host:   exact name  >  "*.suffix" glob (more labels first)  >  "*"
//   2. path:   exact  >  {param} segments (more literal segments first)
//              >  "prefix*" (longer prefix first)  >  no path (any)
//   3. query:  more query conditions  >  fewer  >  none
//   4. method: a method given  >  any method
//   5. mcp:    an MCP tool name given  >  not an MCP tool
//   6. port:   a port given  >  any port
// Requests are matched in their normal form (normalize.hpp) and path patterns
// are normalised at compile time the same way ("/v1//x/" is "/v1/x").
// Two tools that are equally specific on every dimension and can match the
// same request are a tie: compile() reports it and the config is refused.
#pragma once

#include "policy/tool.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace idemgate::policy {

// What the matcher looks at. Views: the caller keeps the data alive for the
// duration of the call.
struct MatchRequest {
  std::string_view method;    // "POST"; compared exactly (HTTP methods are case-sensitive)
  std::string_view host;      // any case, optional trailing dot
  std::uint16_t port = 0;     // 0: unknown
  std::string_view path;      // without the query
  std::string_view query;     // raw, without the '?', e.g. a=1&b=x%20y
  std::string_view mcp_tool;  // params.name of a JSON-RPC tools/call body; empty if none
  bool mcp_any = false;       // an MCP tool of any name matches (to refuse what no tool can read)
};

// params.name when `body` is one JSON-RPC request with method "tools/call";
// nullopt for anything else (batches, other methods, malformed JSON).
// Never throws.
std::optional<std::string> mcp_tool_name(std::string_view body) noexcept;

// A request as it arrived, before normalisation (normalize.hpp).
struct TargetRequest {
  std::string_view method;
  std::string_view scheme;       // "http" or "https"
  std::string_view host;
  std::uint16_t port = 0;        // as connected to (a tool's port: compares with it)
  std::string_view origin_form;  // "/path?query" as sent
  std::string_view mcp_tool;
  bool mcp_any = false;
};

struct TargetMatch {
  const Tool* tool = nullptr;  // the tool of the normalised request, or nullptr
  // Set when the request must be refused rather than matched or passed on:
  // another reading of an ambiguous spelling (%2F, %5C, '\', ";params") is a
  // call of this write tool, which the primary reading is not.
  const Tool* ambiguous_write = nullptr;
  std::string ambiguous_path;  // that reading
};

struct MatchTie {
  std::size_t first = 0;   // index into the tools given to compile()
  std::size_t second = 0;  // the later of the two
  std::string message;
};

class ToolTable;

struct CompiledTools {
  std::shared_ptr<const ToolTable> table;  // always set, even with ties
  std::vector<MatchTie> ties;              // non-empty: the config must be refused
};

class ToolTable {
 public:
  static CompiledTools compile(std::vector<Tool> tools);

  // The most specific tool for the request, or nullptr. Never throws.
  const Tool* match(const MatchRequest& request) const noexcept;

  // Normalises the request (normalize.hpp) and matches it; the entry point
  // for requests off the wire. Only allocation can throw.
  TargetMatch match_target(const TargetRequest& request) const;

  const std::vector<Tool>& tools() const noexcept { return tools_; }
  // Some tool is an MCP tool (match.mcp_tool): requests are read for it.
  bool has_mcp_tools() const noexcept { return has_mcp_tools_; }

  // Precedence key of a tool, larger is more specific (exposed for tests).
  struct Specificity {
    int host_rank = 0, host_detail = 0;
    int path_rank = 0, path_detail = 0;
    int query = 0;
    int method = 0, mcp = 0, port = 0;
    auto operator<=>(const Specificity&) const = default;
  };
  static Specificity specificity(const MatchSpec& spec);

 private:
  struct TransparentHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  template <class V>
  using StringMap = std::unordered_map<std::string, V, TransparentHash, std::equal_to<>>;

  // The tools of one host pattern: exact paths by path, the rest in
  // precedence order. Entries are indexes into tools_.
  struct HostBucket {
    StringMap<std::vector<std::size_t>> exact_paths;
    std::vector<std::size_t> other_paths;
  };

  const Tool* match_bucket(const HostBucket& bucket, const MatchRequest& request) const noexcept;
  // Whether any tool could match a request to this host (normalize_host's
  // form), as match() would look it up: a tool for it, for a suffix of it,
  // or for any host.
  bool may_match_host(std::string_view normal_host) const noexcept;
  bool matches_rest(const Tool& tool, const MatchRequest& request) const noexcept;

  std::vector<Tool> tools_;
  bool has_mcp_tools_ = false;
  StringMap<HostBucket> exact_hosts_;
  StringMap<HostBucket> glob_suffixes_;  // key ".stripe.com" for "*.stripe.com"
  HostBucket any_host_;
};

// Does `path` (normalised) match the pattern (exact, "prefix*" or {param}
// segments)? "/v1/*" also matches "/v1", the normal form of "/v1/".
bool path_matches(std::string_view pattern, std::string_view path) noexcept;

// Does the raw query hold the condition ("name" or "name=value")? Compares
// percent-decoded ('+' as space) without allocating.
bool query_matches(std::string_view condition, std::string_view query) noexcept;

}  // namespace idemgate::policy
