// The tool table: precedence keys, tie detection at compile time, and the
// lookup order (exact host, then globs longest suffix first, then "*").
#include "policy/match.hpp"

#include "policy/mcp.hpp"
#include "policy/normalize.hpp"
#include "policy/percent.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <utility>

namespace idemgate::policy {
namespace {

std::vector<std::string_view> split_segments(std::string_view path) {
  std::vector<std::string_view> segments;
  std::size_t begin = path.empty() ? 0 : 1;
  while (begin <= path.size()) {
    auto end = path.find('/', begin);
    if (end == std::string_view::npos) end = path.size();
    segments.push_back(path.substr(begin, end - begin));
    begin = end + 1;
  }
  return segments;
}

bool is_param(std::string_view segment) { return !segment.empty() && segment.front() == '{'; }
bool is_prefix(std::string_view pattern) { return !pattern.empty() && pattern.back() == '*'; }
bool has_params(std::string_view pattern) { return pattern.find('{') != std::string_view::npos; }

// Given two patterns of the same specificity, can one request match both?
bool paths_overlap(std::string_view a, std::string_view b) {
  if (!has_params(a)) return a == b;  // exact, prefix of equal length, or both empty
  const auto sa = split_segments(a), sb = split_segments(b);
  if (sa.size() != sb.size()) return false;
  for (std::size_t i = 0; i < sa.size(); ++i)
    if (!is_param(sa[i]) && !is_param(sb[i]) && sa[i] != sb[i]) return false;
  return true;
}

std::pair<std::string_view, std::optional<std::string_view>> split_condition(std::string_view condition) {
  const auto equals = condition.find('=');
  if (equals == std::string_view::npos) return {condition, std::nullopt};
  return {condition.substr(0, equals), condition.substr(equals + 1)};
}

// Two sets of query conditions can hold at once unless one parameter must
// have two different values.
bool queries_overlap(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (const auto& x : a)
    for (const auto& y : b) {
      const auto [x_name, x_value] = split_condition(x);
      const auto [y_name, y_value] = split_condition(y);
      if (x_name == y_name && x_value && y_value && *x_value != *y_value) return false;
    }
  return true;
}

// Given two specs of the same specificity, each other dimension is either
// given in both (then only equal values overlap) or absent in both (equal).
bool can_match_same_request(const MatchSpec& a, const MatchSpec& b) {
  return a.host == b.host && paths_overlap(a.path, b.path) && queries_overlap(a.query, b.query) &&
         a.method == b.method && a.mcp_tool == b.mcp_tool && a.port == b.port;
}

}  // namespace

bool path_matches(std::string_view pattern, std::string_view path) noexcept {
  if (pattern.empty()) return true;
  if (is_prefix(pattern)) {
    const auto prefix = pattern.substr(0, pattern.size() - 1);
    return path.starts_with(prefix) || (prefix.size() > 1 && prefix.back() == '/' && path == prefix.substr(0, prefix.size() - 1));
  }
  if (!has_params(pattern)) return pattern == path;
  // Walk both segment by segment without allocating.
  std::size_t p = 0, q = 0;
  while (p < pattern.size() && q < path.size()) {
    if (pattern[p] != path[q]) return false;  // both at '/'
    ++p, ++q;
    auto p_end = pattern.find('/', p), q_end = path.find('/', q);
    if (p_end == std::string_view::npos) p_end = pattern.size();
    if (q_end == std::string_view::npos) q_end = path.size();
    const auto segment = pattern.substr(p, p_end - p);
    if (is_param(segment) ? q_end == q : segment != path.substr(q, q_end - q)) return false;
    p = p_end, q = q_end;
  }
  return p == pattern.size() && q == path.size();
}

bool query_matches(std::string_view condition, std::string_view query) noexcept {
  const auto [name, value] = split_condition(condition);
  std::size_t begin = 0;
  while (begin <= query.size()) {
    auto end = query.find('&', begin);
    if (end == std::string_view::npos) end = query.size();
    const auto pair = query.substr(begin, end - begin);
    const auto equals = pair.find('=');
    const auto raw_name = pair.substr(0, equals);
    const auto raw_value = equals == std::string_view::npos ? std::string_view{} : pair.substr(equals + 1);
    if (!pair.empty() && form_decoded_equals(raw_name, name) && (!value || form_decoded_equals(raw_value, *value))) return true;
    begin = end + 1;
  }
  return false;
}

ToolTable::Specificity ToolTable::specificity(const MatchSpec& spec) {
  Specificity s;
  if (spec.host.starts_with("*.")) {
    s.host_rank = 1;
    s.host_detail = static_cast<int>(std::count(spec.host.begin(), spec.host.end(), '.'));
  } else if (!spec.host.empty() && spec.host != "*") {
    s.host_rank = 2;
  }
  if (is_prefix(spec.path)) {
    s.path_rank = 1;
    s.path_detail = static_cast<int>(spec.path.size() - 1);
  } else if (has_params(spec.path)) {
    s.path_rank = 2;
    const auto segments = split_segments(spec.path);
    s.path_detail = static_cast<int>(std::count_if(segments.begin(), segments.end(),
                                                   [](std::string_view x) { return !is_param(x); }));
  } else if (!spec.path.empty()) {
    s.path_rank = 3;
  }
  s.query = static_cast<int>(spec.query.size());
  s.method = spec.method.empty() ? 0 : 1;
  s.mcp = spec.mcp_tool.empty() ? 0 : 1;
  s.port = spec.port == 0 ? 0 : 1;
  return s;
}

CompiledTools ToolTable::compile(std::vector<Tool> tools) {
  auto table = std::make_shared<ToolTable>();
  for (auto& tool : tools) tool.match.path = normalize_path_pattern(tool.match.path);
  table->tools_ = std::move(tools);
  const auto& all = table->tools_;
  table->has_mcp_tools_ = std::any_of(all.begin(), all.end(), [](const Tool& t) { return !t.match.mcp_tool.empty(); });
  std::vector<Specificity> keys;
  keys.reserve(all.size());
  for (const auto& tool : all) keys.push_back(specificity(tool.match));

  CompiledTools result;
  for (std::size_t i = 0; i < all.size(); ++i)
    for (std::size_t j = i + 1; j < all.size(); ++j)
      if (keys[i] == keys[j] && can_match_same_request(all[i].match, all[j].match))
        result.ties.push_back({i, j,
                               "tool '" + all[j].name + "' ties with tool '" + all[i].name +
                                   "' (line " + std::to_string(all[i].source_line) +
                                   "): both are equally specific and can match the same request"});

  // Most specific first, declaration order among equals (only non-overlapping
  // tools can be equal once ties are refused).
  std::vector<std::size_t> order(all.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return keys[a] > keys[b]; });
  for (const auto index : order) {
    const auto& spec = all[index].match;
    HostBucket* bucket = &table->any_host_;
    if (keys[index].host_rank == 2) bucket = &table->exact_hosts_[spec.host];
    else if (keys[index].host_rank == 1) bucket = &table->glob_suffixes_[spec.host.substr(1)];
    if (keys[index].path_rank == 3) bucket->exact_paths[spec.path].push_back(index);
    else bucket->other_paths.push_back(index);
  }
  result.table = std::move(table);
  return result;
}

bool ToolTable::matches_rest(const Tool& tool, const MatchRequest& request) const noexcept {
  const auto& spec = tool.match;
  return (spec.method.empty() || spec.method == request.method) &&
         (spec.mcp_tool.empty() || request.mcp_any || spec.mcp_tool == request.mcp_tool) &&
         (spec.port == 0 || spec.port == request.port) &&
         std::all_of(spec.query.begin(), spec.query.end(),
                     [&](const std::string& condition) { return query_matches(condition, request.query); });
}

const Tool* ToolTable::match_bucket(const HostBucket& bucket, const MatchRequest& request) const noexcept {
  if (const auto it = bucket.exact_paths.find(request.path); it != bucket.exact_paths.end())
    for (const auto index : it->second)
      if (matches_rest(tools_[index], request)) return &tools_[index];
  for (const auto index : bucket.other_paths) {
    const auto& tool = tools_[index];
    if (path_matches(tool.match.path, request.path) && matches_rest(tool, request)) return &tool;
  }
  return nullptr;
}

namespace {

// The key a host is looked up by: lowercased into a stack buffer, without
// one trailing dot. No allocation, so nothing can fail here. A DNS name is
// at most 253 characters; anything longer matches no host (nullopt).
std::optional<std::string_view> host_key(std::string_view raw, char (&buffer)[256]) noexcept {
  if (!raw.empty() && raw.back() == '.') raw.remove_suffix(1);
  if (raw.size() > sizeof buffer) return std::nullopt;
  for (std::size_t i = 0; i < raw.size(); ++i)
    buffer[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(raw[i])));
  return std::string_view(buffer, raw.size());
}

}  // namespace

const Tool* ToolTable::match(const MatchRequest& request) const noexcept {
  char buffer[256];
  const auto key = host_key(request.host, buffer);
  if (!key) return nullptr;
  const std::string_view host = *key;

  if (const auto it = exact_hosts_.find(host); it != exact_hosts_.end())
    if (const auto* tool = match_bucket(it->second, request)) return tool;
  if (!glob_suffixes_.empty()) {
    // ".b.example.com" before ".example.com": more labels is more specific.
    for (auto dot = host.find('.'); dot != std::string_view::npos; dot = host.find('.', dot + 1)) {
      const auto suffix = host.substr(dot);
      if (const auto it = glob_suffixes_.find(suffix); it != glob_suffixes_.end())
        if (const auto* tool = match_bucket(it->second, request)) return tool;
    }
  }
  return match_bucket(any_host_, request);
}

bool ToolTable::may_match_host(std::string_view normal_host) const noexcept {
  if (!any_host_.exact_paths.empty() || !any_host_.other_paths.empty()) return true;
  // The key match() looks the host up by.
  char buffer[256];
  const auto key = host_key(normal_host, buffer);
  if (!key) return false;
  const std::string_view host = *key;
  if (!exact_hosts_.empty() && exact_hosts_.contains(host)) return true;
  if (glob_suffixes_.empty()) return false;
  for (auto dot = host.find('.'); dot != std::string_view::npos; dot = host.find('.', dot + 1))
    if (glob_suffixes_.contains(host.substr(dot))) return true;
  return false;
}

TargetMatch ToolTable::match_target(const TargetRequest& request) const {
  TargetMatch result;
  // Most requests through a proxy go to hosts no tool names: the host
  // alone tells, before the path and query are normalised. Without '%' or a
  // trailing dot, normalize_host would only lowercase it, which the lookup
  // does too: it is looked up as it is.
  const std::string_view host = request.host;
  if (!host.empty() && host.back() != '.' && host.find('%') == std::string_view::npos) {
    if (!may_match_host(host)) return result;
  } else if (const auto normal = normalize_host(host); !normal || !may_match_host(*normal)) {
    return result;
  }
  const auto target = normalize_target(request.scheme, request.host, request.port, request.origin_form);
  if (target.host.empty()) return result;
  MatchRequest normal;
  normal.method = request.method;
  normal.host = target.host;
  normal.port = request.port;
  normal.path = target.path.path;
  normal.query = target.query ? std::string_view(*target.query) : std::string_view();
  normal.mcp_tool = request.mcp_tool;
  normal.mcp_any = request.mcp_any;
  result.tool = match(normal);
  for (const auto& reading : target.path.alternates) {
    normal.path = reading;
    const auto* other = match(normal);
    if (other && other != result.tool && other->effect != Effect::read) {
      result.ambiguous_write = other;
      result.ambiguous_path = reading;
      break;
    }
  }
  return result;
}

std::optional<std::string> mcp_tool_name(std::string_view body) noexcept {
  auto request = inspect_mcp_request({}, body);
  if (request.kind != McpKind::tools_call) return std::nullopt;
  return std::move(request.tool);
}

}  // namespace idemgate::policy
