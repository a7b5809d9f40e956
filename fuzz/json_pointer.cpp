// RFC 6901 pointers: syntax checks, lookup and removal on any JSON document.
// Input: line 1 the pointer, the rest the JSON document.
#include "fuzz/split.hpp"
#include "policy/json_pointer.hpp"
#include "policy/pattern.hpp"

#include <boost/json/parse.hpp>

#include <cstdlib>

using namespace idemgate::policy;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto rest = idemgate::fuzz::as_text(data, size);
  const auto pointer = idemgate::fuzz::take_line(rest);
  const bool valid = !json_pointer_error(pointer).has_value();
  if (valid) {
    // Tokens and back agree.
    if (json_pointer_from_tokens(json_pointer_tokens(pointer)) != pointer) std::abort();
  }
  boost::system::error_code ec;
  auto document = boost::json::parse(rest, ec);
  if (ec) return 0;
  const auto* found = find_pointer(document, pointer);
  if (!valid) return 0;
  if (pointer.empty() && found != &document) std::abort();
  auto copy = document;
  const bool erased = erase_pointer(copy, pointer);
  // Only something that is there can be removed, and then it is gone (or,
  // in an array, replaced by its next element).
  if (erased && !found) std::abort();
  if (found && !pointer.empty() && !erased) std::abort();
  return 0;
}
