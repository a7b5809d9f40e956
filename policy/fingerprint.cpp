// Canonical forms of requests and bodies, hashed with HMAC-SHA256.
#include "policy/fingerprint.hpp"

#include "policy/hmac.hpp"
#include "policy/json_parse.hpp"
#include "policy/json_string.hpp"
#include "policy/json_pointer.hpp"
#include "policy/mcp.hpp"
#include "policy/normalize.hpp"
#include "policy/pattern.hpp"
#include "policy/percent.hpp"

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace idemgate::policy {
namespace {

// Each field is length-prefixed so no two different inputs share a text.
void append_field(std::string& out, std::string_view field) {
  char length[20];
  auto const end = std::to_chars(length, length + sizeof length, field.size()).ptr;
  out.append(length, end);
  out += ':';
  out += field;
  out += '\n';
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return out;
}

template <class Int>
void append_integer(std::string& out, Int n) {
  char digits[24];
  out.append(digits, std::to_chars(digits, digits + sizeof digits, n).ptr);
}

void append_canonical_number(std::string& out, double number) {
  // Integral values print as integers so 1.0, 1e0 and 1 agree.
  if (std::isfinite(number) && number == std::trunc(number) && std::fabs(number) < 9.2e18) {
    append_integer(out, static_cast<long long>(number));
    return;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", number);
  out += buffer;
}

void append_canonical(std::string& out, const boost::json::value& value) {
  switch (value.kind()) {
    case boost::json::kind::null: out += "null"; break;
    case boost::json::kind::bool_: out += value.get_bool() ? "true" : "false"; break;
    case boost::json::kind::int64: append_integer(out, value.get_int64()); break;
    case boost::json::kind::uint64: append_integer(out, value.get_uint64()); break;
    case boost::json::kind::double_: append_canonical_number(out, value.get_double()); break;
    // Escaped as Boost.JSON's serializer escapes (the bytes every stored
    // fingerprint was made of), without a serializer a string.
    case boost::json::kind::string: append_json_string(out, value.get_string()); break;
    case boost::json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value.get_array()) {
        if (!std::exchange(first, false)) out += ',';
        append_canonical(out, item);
      }
      out += ']';
      break;
    }
    case boost::json::kind::object: {
      const auto& object = value.get_object();
      boost::container::small_vector<const boost::json::key_value_pair*, 16> members;
      for (const auto& member : object) members.push_back(&member);
      std::sort(members.begin(), members.end(),
                [](const auto* a, const auto* b) { return a->key() < b->key(); });
      out += '{';
      bool first = true;
      for (const auto* member : members) {
        if (!std::exchange(first, false)) out += ',';
        append_json_string(out, member->key());
        out += ':';
        append_canonical(out, member->value());
      }
      out += '}';
      break;
    }
  }
}

// "metadata[order]" -> {"metadata", "order"}; "a[]" -> {"a", ""}; a key with
// unbalanced brackets is one token.
std::vector<std::string> form_key_tokens(const std::string& key) {
  const auto open = key.find('[');
  if (open == std::string::npos || open == 0) return {key};
  std::vector<std::string> tokens{key.substr(0, open)};
  std::size_t i = open;
  while (i < key.size()) {
    if (key[i] != '[') return {key};
    const auto close = key.find(']', i);
    if (close == std::string::npos) return {key};
    tokens.push_back(key.substr(i + 1, close - i - 1));
    i = close + 1;
  }
  return tokens;
}

// Best effort: a key used both as a leaf and as a parent keeps the first use.
void insert_form_pair(boost::json::value& root, const std::vector<std::string>& tokens, const std::string& value) {
  boost::json::value* node = &root;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const bool leaf = i + 1 == tokens.size();
    const bool append = tokens[i].empty() && i > 0;
    if (append) {
      if (!node->is_array()) return;
      if (leaf) {
        node->get_array().emplace_back(value);
        return;
      }
      node = &node->get_array().emplace_back(boost::json::object());
      continue;
    }
    if (!node->is_object()) return;
    auto& object = node->get_object();
    if (leaf) {
      if (!object.contains(tokens[i])) object[tokens[i]] = value;
      return;
    }
    const bool next_is_append = tokens[i + 1].empty();
    auto [it, fresh] = object.emplace(tokens[i], next_is_append ? boost::json::value(boost::json::array())
                                                                    : boost::json::value(boost::json::object()));
    node = &it->value();
  }
}

bool pointer_is_ignored(const std::vector<std::string>& ignore, const std::string& pointer) {
  return std::any_of(ignore.begin(), ignore.end(), [&](const std::string& p) {
    return pointer == p || (pointer.size() > p.size() && pointer.starts_with(p) && pointer[p.size()] == '/');
  });
}

// The normal form of the target (normalize.hpp, the form matching reads),
// with query parameters decoded, sorted by name and the ignored ones left out.
std::string canonical_target(const FingerprintInput& input, const Tool& tool) {
  const auto target = normalize_target(input.scheme, input.host, input.port, input.target);
  std::string out = target.scheme + "://" + (target.host.empty() ? lowercase(input.host) : target.host);
  if (target.port != 0) out += ":" + std::to_string(target.port);
  out += target.path.path;
  if (!target.query) return out;
  std::vector<std::pair<std::string, std::string>> params;
  std::string_view const query = *target.query;
  std::size_t begin = 0;
  while (begin <= query.size()) {
    auto end = query.find('&', begin);
    if (end == std::string_view::npos) end = query.size();
    const auto pair = query.substr(begin, end - begin);
    begin = end + 1;
    if (pair.empty()) continue;
    const auto equals = pair.find('=');
    auto key = form_decode(pair.substr(0, equals));
    const auto& ignored = tool.fingerprint.ignore_query;
    if (std::find(ignored.begin(), ignored.end(), key) != ignored.end()) continue;
    params.emplace_back(std::move(key), equals == std::string_view::npos ? "" : "=" + form_decode(pair.substr(equals + 1)));
  }
  std::stable_sort(params.begin(), params.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 0; i < params.size(); ++i) {
    out += i == 0 ? '?' : '&';
    append_field(out, params[i].first);
    append_field(out, params[i].second);
  }
  return out;
}

std::vector<std::string> effective_ignores(const Tool& tool) {
  auto ignore = tool.fingerprint.ignore;
  if (!tool.match.mcp_tool.empty()) ignore.push_back("/id");
  return ignore;
}

}  // namespace

std::string canonical_json(const boost::json::value& value) {
  std::string out;
  append_canonical(out, value);
  return out;
}

std::vector<FormPair> parse_form(std::string_view body) {
  std::vector<FormPair> pairs;
  std::size_t begin = 0;
  while (begin <= body.size()) {
    auto end = body.find('&', begin);
    if (end == std::string_view::npos) end = body.size();
    const auto pair = body.substr(begin, end - begin);
    if (!pair.empty()) {
      const auto equals = pair.find('=');
      const auto key = form_decode(pair.substr(0, equals));
      const auto value = equals == std::string_view::npos ? std::string() : form_decode(pair.substr(equals + 1));
      pairs.push_back({json_pointer_from_tokens(form_key_tokens(key)), value});
    }
    begin = end + 1;
  }
  return pairs;
}

std::vector<std::string> missing_required(const Tool& tool, const boost::json::value* body) {
  std::vector<std::string> missing;
  for (const auto& pointer : tool.require)
    if (!body || !find_pointer(*body, pointer)) missing.push_back(pointer);
  return missing;
}

Fingerprint fingerprint(const FingerprintInput& input, const Tool& tool) noexcept {
  Fingerprint result;
  try {
    std::string material;
    // Room for what is appended below in most requests: one growth at most.
    material.reserve(512 + input.target.size() + input.body.size());
    material = "idemgate-fingerprint-v3\n";
    append_field(material, tool.name);
    append_field(material, input.method);
    append_field(material, canonical_target(input, tool));

    // Configured headers, by lowercase name; the key header never counts.
    // One sent more than once counts with every copy (header_values): the
    // upstream may read any of them, so two calls that differ in a later
    // copy are two calls.
    std::vector<std::pair<std::string, std::string>> headers;
    for (const auto& name : tool.fingerprint.headers) {
      if (iequals(name, tool.idempotency.header) || iequals(name, "Idempotency-Key")) continue;
      const auto value = header_values(input.headers, name);
      headers.emplace_back(lowercase(name), value ? "=" + *value : "");
    }
    std::sort(headers.begin(), headers.end());
    for (const auto& [name, value] : headers) {
      append_field(material, name);
      append_field(material, value);
    }

    const auto ignore = effective_ignores(tool);
    std::string canonical_body;
    if (input.body.empty()) {
      result.body_kind = BodyKind::empty;
    } else if (is_json_media_type(input.content_type)) {
      boost::system::error_code ec;
      bool repeated_names = false;
      auto parsed = parse_json(input.body, ec, &repeated_names);
      if (ec) {
        result.body_kind = BodyKind::raw;
        result.malformed = true;
        canonical_body = input.body;
      } else {
        result.repeated_names = repeated_names;
        result.body_kind = BodyKind::json;
        // result.body keeps the body as sent; what is hashed loses the
        // ignored members, in a copy only when there are some.
        std::optional<boost::json::value> trimmed;
        if (!ignore.empty()) {
          trimmed = parsed;
          for (const auto& pointer : ignore) erase_pointer(*trimmed, pointer);
        }
        const boost::json::value& hashed = trimmed ? *trimmed : parsed;
        // An MCP tools/call is its name and arguments: the JSON-RPC id and
        // params._meta change on every re-issue of the same call.
        auto mcp = tool.match.mcp_tool.empty() ? std::nullopt : mcp_call_material(hashed);
        canonical_body = mcp ? std::move(*mcp) : canonical_json(hashed);
        result.body = std::move(parsed);
      }
    } else if (is_form_media_type(input.content_type)) {
      result.body_kind = BodyKind::form;
      auto pairs = parse_form(input.body);
      boost::json::value as_json = boost::json::object();
      for (const auto& pair : pairs) insert_form_pair(as_json, json_pointer_tokens(pair.pointer), pair.value);
      result.body = std::move(as_json);
      std::erase_if(pairs, [&](const FormPair& p) { return pointer_is_ignored(ignore, p.pointer); });
      std::stable_sort(pairs.begin(), pairs.end(), [](const FormPair& a, const FormPair& b) { return a.pointer < b.pointer; });
      for (const auto& pair : pairs) {
        append_field(canonical_body, pair.pointer);
        append_field(canonical_body, pair.value);
      }
    } else {
      result.body_kind = BodyKind::raw;
      canonical_body = input.body;
    }
    append_field(material, std::to_string(static_cast<int>(result.body_kind)));
    append_field(material, canonical_body);
    result.hex = hmac_sha256_hex(input.key, material);
  } catch (...) {
    // Only allocation can fail here; an empty hex tells the caller to fail closed.
    result.hex.clear();
  }
  return result;
}

}  // namespace idemgate::policy
