// The spelling of every policy enum in config files, headers and logs, kept in
// one table per enum so parsing, printing and "valid values are ..." messages
// can never disagree.
#pragma once

#include "policy/tool.hpp"

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace idemgate::policy {

// Specialised per enum: `names[i]` is the spelling of the enumerator with value i.
template <class E>
struct EnumNames;

template <>
struct EnumNames<Effect> {
  static constexpr std::array<std::string_view, 3> names{"read", "write", "money"};
};
template <>
struct EnumNames<AnswerClass> {
  static constexpr std::array<std::string_view, 12> names{
      "ok",         "rate_limited", "transient",      "unknown",     "auth",
      "forbidden",  "not_found",    "validation",     "conflict",    "money_rejected",
      "policy_deny", "unclassified"};
};
template <>
struct EnumNames<KeyMode> {
  static constexpr std::array<std::string_view, 3> names{"inject", "require", "passthrough"};
};
template <>
struct EnumNames<KeyBinding> {
  static constexpr std::array<std::string_view, 2> names{"enforce", "strict"};
};
template <>
struct EnumNames<ReconcileMode> {
  static constexpr std::array<std::string_view, 3> names{"same_key", "query", "none"};
};
template <>
struct EnumNames<RetryAfterMode> {
  static constexpr std::array<std::string_view, 2> names{"hold", "reject"};
};
template <>
struct EnumNames<PolicyAction> {
  static constexpr std::array<std::string_view, 3> names{"allow", "deny", "pending_approval"};
};
template <>
struct EnumNames<FingerprintScope> {
  static constexpr std::array<std::string_view, 2> names{"run", "global"};
};
template <>
struct EnumNames<Unmatched> {
  static constexpr std::array<std::string_view, 2> names{"pass", "deny"};
};

template <>
struct EnumNames<AuthMode> {
  static constexpr std::array<std::string_view, 2> names{"off", "required"};
};

template <class E>
constexpr std::string_view enum_name(E value) noexcept {
  const auto& names = EnumNames<E>::names;
  const auto index = static_cast<std::size_t>(value);
  return index < names.size() ? names[index] : std::string_view{"?"};
}

template <class E>
constexpr std::optional<E> parse_enum(std::string_view text) noexcept {
  const auto& names = EnumNames<E>::names;
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<E>(i);
  return std::nullopt;
}

// "read, write, money": for "valid values are ..." messages.
template <class E>
std::string enum_names_joined() {
  std::string out;
  for (auto name : EnumNames<E>::names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace idemgate::policy
