// The config loader: YAML text through yaml-cpp, the schema reader,
// normalisation, validation and the tool table compiler.
// Input: a config file.
#include "config/config.hpp"
#include "fuzz/split.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto result = idemgate::config::load_string(idemgate::fuzz::as_text(data, size), "fuzz.yaml");
  // Either a config or at least one error, never both, never neither.
  if ((result.config == nullptr) == result.errors.empty()) std::abort();
  for (const auto& error : result.errors) {
    if (error.message.empty()) std::abort();
    (void)idemgate::config::format(error);
  }
  if (result.config && !result.config->tool_table) std::abort();
  return 0;
}
