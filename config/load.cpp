// load_file / load_string: YAML text -> plain structs -> validate() -> an
// immutable snapshot, or every error found with file:line:column.
#include "config/config.hpp"

#include "config/schema.hpp"
#include "config/validate.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>
#include <variant>

namespace idemgate::config {

std::string format(const ConfigError& error) {
  std::string out = error.file;
  if (error.line > 0) {
    out += ":" + std::to_string(error.line);
    if (error.column > 0) out += ":" + std::to_string(error.column);
  }
  return out + ": " + error.message;
}

namespace {

// auth.users_file is read with the config, so a reload (SIGHUP) also
// reloads the users; its errors name the users file's line.
void load_users(Config& config, const SourceMap& positions, std::vector<ConfigError>& errors) {
  if (config.auth.mode != policy::AuthMode::required) return;
  const auto& path = config.auth.users_file;
  if (path.empty()) {
    const auto where = positions.find("auth.mode");
    errors.push_back({config.source_path, where.line, where.column,
                      "auth.mode required needs auth.users_file (create it with: idemgate auth add-user FILE NAME)"});
    return;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const auto where = positions.find("auth.users_file");
    errors.push_back({config.source_path, where.line, where.column,
                      "cannot read auth.users_file " + path + ": " + std::strerror(errno)});
    return;
  }
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line.front() == '#') continue;
    auto parsed = policy::parse_user_line(line);
    if (auto* why = std::get_if<std::string>(&parsed)) {
      errors.push_back({path, line_number, 0, *why});
      continue;
    }
    auto& entry = std::get<policy::UserEntry>(parsed);
    if (policy::find_user(config.auth.users, entry.name)) {
      errors.push_back({path, line_number, 0, "user '" + entry.name + "' appears twice"});
      continue;
    }
    config.auth.users.push_back(std::move(entry));
  }
  if (config.auth.users.empty() && errors.empty())
    errors.push_back({path, 0, 0, "no users: add one with idemgate auth add-user " + path + " NAME"});
}

}  // namespace

LoadResult load_string(std::string_view yaml, const std::string& file_name) {
  LoadResult result;
  auto config = std::make_shared<Config>();
  config->source_path = file_name;
  SourceMap positions;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    // An empty file is a config of defaults with no tools.
    if (!root.IsNull()) {
      detail::YamlReader reader(file_name, result.errors, positions);
      reader.read_struct(root, *config, detail::config_fields());
    }
  } catch (const YAML::Exception& e) {
    result.errors.push_back({file_name, e.mark.line + 1, e.mark.column + 1, e.msg});
    return result;
  }
  // The admin listener serves only where it was asked for: a default port
  // would collide between processes on one host.
  config->admin.enabled = positions.written("admin.listen");
  normalise(*config);
  validate(*config, positions, result.errors);
  load_users(*config, positions, result.errors);
  auto compiled = policy::ToolTable::compile(config->tools);
  for (const auto& tie : compiled.ties) {
    const auto where = positions.find("tools[" + std::to_string(tie.second) + "].match");
    result.errors.push_back({file_name, where.line, where.column, tie.message});
  }
  config->tool_table = std::move(compiled.table);
  // Reported in file order, whichever pass found them.
  std::stable_sort(result.errors.begin(), result.errors.end(), [](const ConfigError& a, const ConfigError& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  if (result.errors.empty()) result.config = std::move(config);
  return result;
}

LoadResult load_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    LoadResult result;
    result.errors.push_back({path, 0, 0, std::string("cannot read the file: ") + std::strerror(errno)});
    return result;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return load_string(text.str(), path);
}

}  // namespace idemgate::config
