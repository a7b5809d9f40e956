// JSON text -> Boost.JSON value with every number correctly rounded.
// Boost 1.81's parser reads some decimals one unit in the last place off
// ("1.5e-300"), so two spellings of one number could parse to two doubles
// and canonicalise, and fingerprint, differently.
#pragma once

#include <boost/json/value.hpp>
#include <boost/system/error_code.hpp>

#include <string_view>

namespace idemgate::policy {

// Standard JSON only (no comments, no trailing commas), nesting depth 32 as
// boost::json::parse. On error returns null and sets ec. `repeated_names`,
// when given, is set to whether some object names a member more than once:
// the value keeps the last, and RFC 8259 leaves what a receiver makes of
// such an object open (others keep the first).
boost::json::value parse_json(std::string_view text, boost::system::error_code& ec, bool* repeated_names = nullptr);

}  // namespace idemgate::policy
