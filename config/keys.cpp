// Listing the schema's keys and the keys a file writes.
#include "config/keys.hpp"

#include "config/schema.hpp"

#include <regex>

namespace idemgate::config {

std::vector<std::string> known_key_paths() {
  std::vector<std::string> paths;
  detail::collect_key_paths(detail::config_fields(), "", paths);
  return paths;
}

std::vector<std::string> written_key_paths(std::string_view yaml) {
  std::vector<ConfigError> errors;
  SourceMap positions;
  Config ignored;
  try {
    detail::YamlReader reader("", errors, positions);
    reader.read_struct(YAML::Load(std::string(yaml)), ignored, detail::config_fields());
  } catch (const YAML::Exception&) {
    return {};
  }
  static const std::regex list_index(R"(\[[0-9]+\])");
  std::vector<std::string> paths;
  for (const auto& [path, where] : positions.positions()) {
    auto normalised = std::regex_replace(path, list_index, "[]");
    if (!normalised.ends_with("[]") && (paths.empty() || paths.back() != normalised)) paths.push_back(normalised);
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

}  // namespace idemgate::config
