// Walking Boost.JSON values by JSON pointer tokens.
#include "policy/json_pointer.hpp"

#include "policy/pattern.hpp"

#include <charconv>
#include <optional>

namespace idemgate::policy {
namespace {

// An array index token: digits only, no leading zero (RFC 6901).
std::optional<std::size_t> array_index(std::string_view token) {
  if (token.empty() || (token.size() > 1 && token.front() == '0')) return std::nullopt;
  std::size_t index = 0;
  const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), index);
  if (ec != std::errc{} || ptr != token.data() + token.size()) return std::nullopt;
  return index;
}

// V is value or const value: one walk serves lookup and removal.
template <class V>
V* child(V& parent, std::string_view token) {
  if (auto* object = parent.if_object()) return object->if_contains(token);
  if (auto* array = parent.if_array()) {
    const auto index = array_index(token);
    return index && *index < array->size() ? &(*array)[*index] : nullptr;
  }
  return nullptr;
}

}  // namespace

const boost::json::value* find_pointer(const boost::json::value& root, std::string_view pointer) noexcept {
  try {
    const auto* current = &root;
    for (const auto& token : json_pointer_tokens(pointer))
      if (!(current = child(*current, token))) return nullptr;
    return current;
  } catch (...) {
    return nullptr;
  }
}

bool erase_pointer(boost::json::value& root, std::string_view pointer) {
  auto tokens = json_pointer_tokens(pointer);
  if (tokens.empty()) return false;
  const auto last = std::move(tokens.back());
  tokens.pop_back();
  auto* parent = &root;
  for (const auto& token : tokens)
    if (!(parent = child(*parent, token))) return false;
  if (auto* object = parent->if_object()) return object->erase(last) != 0;
  if (auto* array = parent->if_array()) {
    const auto index = array_index(last);
    if (!index || *index >= array->size()) return false;
    array->erase(array->begin() + static_cast<std::ptrdiff_t>(*index));
    return true;
  }
  return false;
}

}  // namespace idemgate::policy
