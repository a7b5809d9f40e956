// URL templates, lookup answers and receipts.
#include "policy/reconcile.hpp"

#include "policy/json_pointer.hpp"
#include "policy/pattern.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace idemgate::policy {
namespace {

// Unreserved characters (RFC 3986) stay, everything else is %XX.
void append_encoded(std::string& out, std::string_view value) {
  static constexpr char hex[] = "0123456789ABCDEF";
  for (unsigned char c : value) {
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                            c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
}

std::string scalar_text(const boost::json::value& value) {
  if (const auto* s = value.if_string()) return std::string(*s);
  return boost::json::serialize(value);
}

// Calls on_text(text) for literal runs and on_placeholder(name) for each
// {name}; returns an error for an unclosed brace.
template <class OnText, class OnPlaceholder>
std::optional<std::string> walk_template(std::string_view tmpl, OnText on_text, OnPlaceholder on_placeholder) {
  std::size_t i = 0;
  while (i < tmpl.size()) {
    const auto open = tmpl.find('{', i);
    on_text(tmpl.substr(i, open == std::string_view::npos ? std::string_view::npos : open - i));
    if (open == std::string_view::npos) break;
    const auto close = tmpl.find('}', open);
    if (close == std::string_view::npos) return "unclosed '{' in '" + std::string(tmpl) + "'";
    if (auto problem = on_placeholder(tmpl.substr(open + 1, close - open - 1))) return problem;
    i = close + 1;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> url_template_error(std::string_view url_template) {
  return walk_template(url_template, [](std::string_view) {}, [](std::string_view name) -> std::optional<std::string> {
    if (name == "key" || name == "receipt") return std::nullopt;
    if (name.empty() || name.front() != '/')
      return "unknown placeholder {" + std::string(name) + "}; use {key}, {receipt} or {/json/pointer}";
    return json_pointer_error(name);
  });
}

std::optional<std::string> expand_url_template(std::string_view url_template, const TemplateValues& values) {
  std::string out;
  bool complete = true;
  const auto problem = walk_template(
      url_template, [&](std::string_view text) { out += text; },
      [&](std::string_view name) -> std::optional<std::string> {
        if (name == "key") {
          append_encoded(out, values.key);
          complete &= !values.key.empty();
        } else if (name == "receipt") {
          append_encoded(out, values.receipt);
          complete &= !values.receipt.empty();
        } else {
          const auto* found = values.body ? find_pointer(*values.body, name) : nullptr;
          if (found) append_encoded(out, scalar_text(*found));
          complete &= found != nullptr;
        }
        return std::nullopt;
      });
  if (problem || !complete) return std::nullopt;
  return out;
}

bool query_found(const ReconcileQuery& query, std::string_view answer_body) noexcept {
  try {
    boost::system::error_code ec;
    const auto answer = boost::json::parse(answer_body, ec);
    if (ec) return false;
    const auto* found = find_pointer(answer, query.found);
    return found && !found->is_null();
  } catch (...) {
    return false;
  }
}

std::optional<std::string> receipt_of(const Tool& tool, std::string_view answer_body) noexcept {
  try {
    if (tool.receipt.empty()) return std::nullopt;
    boost::system::error_code ec;
    const auto answer = boost::json::parse(answer_body, ec);
    if (ec) return std::nullopt;
    const auto* found = find_pointer(answer, tool.receipt);
    if (!found || found->is_null()) return std::nullopt;
    return scalar_text(*found);
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace idemgate::policy
