// Scalar reading and unknown-key reporting for YamlReader.
#include "config/yaml_reader.hpp"

#include <limits>

namespace idemgate::config::detail {

std::string YamlReader::key_name() const {
  const auto& p = path();
  const auto cut = p.find_last_of('.');
  return cut == std::string::npos ? p : p.substr(cut + 1);
}

bool YamlReader::read_scalar(const YAML::Node& node, const std::string& expected, std::string& out) {
  if (!node.IsScalar()) {
    error(node.Mark(), "'" + key_name() + "' must be " + expected +
                           (node.IsNull() ? ", got nothing" : node.IsMap() ? ", got a mapping"
                                                                           : ", got a list"));
    return false;
  }
  out = node.Scalar();
  return true;
}

void YamlReader::report_unknown_key(const YAML::Node& key, const std::vector<std::string_view>& valid) {
  const auto& name = key.Scalar();
  std::string_view nearest;
  std::size_t best = std::numeric_limits<std::size_t>::max();
  for (auto candidate : valid) {
    const auto distance = edit_distance(name, candidate);
    if (distance < best) {
      best = distance;
      nearest = candidate;
    }
  }
  // A suggestion farther than a third of the word is noise, not help.
  const std::size_t plausible = std::max<std::size_t>(2, nearest.size() / 3);
  if (!nearest.empty() && best <= plausible) {
    error(key.Mark(), "unknown key '" + name + "'; did you mean '" + std::string(nearest) + "'?");
    return;
  }
  std::string keys;
  for (auto k : valid) keys += (keys.empty() ? "" : ", ") + std::string(k);
  error(key.Mark(), "unknown key '" + name + "'; valid keys here: " + keys);
}

void YamlReader::read_value(const YAML::Node& node, std::string& out) {
  read_scalar(node, "a string", out);
}

void YamlReader::read_value(const YAML::Node& node, bool& out) {
  std::string text;
  if (!read_scalar(node, "true or false", text)) return;
  if (text == "true") out = true;
  else if (text == "false") out = false;
  else error(node.Mark(), "'" + key_name() + "' must be true or false, got '" + text + "'");
}

void YamlReader::read_value(const YAML::Node& node, int& out) {
  read_integer(node, out, std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
}

void YamlReader::read_value(const YAML::Node& node, unsigned& out) {
  read_integer(node, out, 0, std::numeric_limits<unsigned>::max());
}

void YamlReader::read_value(const YAML::Node& node, std::uint16_t& out) {
  read_integer(node, out, 0, 65535);
}

void YamlReader::read_value(const YAML::Node& node, std::optional<int>& out) {
  int value = 0;
  const auto errors_before = errors_.size();
  read_value(node, value);
  if (errors_.size() == errors_before) out = value;
}

void YamlReader::read_value(const YAML::Node& node, Duration& out) {
  std::string text;
  if (!read_scalar(node, "a duration such as 250ms, 15s, 15m or 24h", text)) return;
  auto parsed = parse_duration(text);
  if (auto* value = std::get_if<Duration>(&parsed)) out = *value;
  else error(node.Mark(), "'" + key_name() + "': " + std::get<std::string>(parsed));
}

void YamlReader::read_value(const YAML::Node& node, Endpoint& out) {
  std::string text;
  if (!read_scalar(node, "host:port", text)) return;
  auto parsed = parse_endpoint(text);
  if (auto* value = std::get_if<Endpoint>(&parsed)) out = std::move(*value);
  else error(node.Mark(), "'" + key_name() + "': " + std::get<std::string>(parsed));
}

void YamlReader::read_value(const YAML::Node& node, std::vector<std::string>& out) {
  if (!node.IsSequence()) {
    error(node.Mark(), "'" + key_name() + "' must be a list of strings");
    return;
  }
  out.clear();
  for (const auto& item : node) {
    std::string text;
    if (read_scalar(item, "a string", text)) out.push_back(std::move(text));
  }
}

void YamlReader::read_size(const YAML::Node& node, std::uint64_t& out) {
  std::string text;
  if (!read_scalar(node, "a size such as 4096, 64KiB or 1MiB", text)) return;
  auto parsed = parse_size(text);
  if (auto* value = std::get_if<std::uint64_t>(&parsed)) out = *value;
  else error(node.Mark(), "'" + key_name() + "': " + std::get<std::string>(parsed));
}

}  // namespace idemgate::config::detail
