// RFC 6901 JSON pointers over Boost.JSON values: look a value up, or remove
// it (for fingerprint `ignore:`). Syntax checks live in pattern.hpp.
#pragma once

#include <boost/json/value.hpp>

#include <string_view>

namespace idemgate::policy {

// The value `pointer` names inside `root`, or nullptr. "" is the root itself.
const boost::json::value* find_pointer(const boost::json::value& root, std::string_view pointer) noexcept;

// Removes what `pointer` names (an object member or an array element);
// returns whether something was removed. The root itself is never removed.
bool erase_pointer(boost::json::value& root, std::string_view pointer);

}  // namespace idemgate::policy
