// Internal to config/: reads a yaml-cpp node tree into the plain structs of
// config.hpp through per-struct field tables. The table is the schema: the
// keys it lists are the only ones accepted, an unknown key is reported with
// the nearest valid one, and every error is collected rather than thrown.
#pragma once

#include "config/config.hpp"
#include "config/source_map.hpp"
#include "config/units.hpp"
#include "policy/enum_names.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace idemgate::config::detail {

class YamlReader;

template <class T>
struct Field {
  std::string_view key;
  std::function<void(YamlReader&, const YAML::Node& value, T& out)> read;
  // For a mapping or list of mappings: appends the dotted paths of the keys
  // below this one ("query.url"), so the whole schema can be listed.
  std::function<void(const std::string& prefix, std::vector<std::string>& out)> list_children{};
};

template <class T>
using Fields = std::vector<Field<T>>;

class YamlReader {
 public:
  YamlReader(std::string file, std::vector<ConfigError>& errors, SourceMap& positions)
      : file_(std::move(file)), errors_(errors), positions_(positions) {}

  void error(const YAML::Mark& mark, std::string message) {
    errors_.push_back({file_, mark.line + 1, mark.column + 1, std::move(message)});
  }

  // The dotted path of the key being read, for the source map and messages.
  const std::string& path() const { return path_.back(); }
  void enter(const std::string& segment, const YAML::Mark& mark) {
    const auto& parent = path_.back();
    std::string child = segment.front() == '[' || parent.empty() ? parent + segment
                                                                 : parent + "." + segment;
    positions_.record(child, {mark.line + 1, mark.column + 1});
    path_.push_back(std::move(child));
  }
  void leave() { path_.pop_back(); }

  template <class T>
  void read_struct(const YAML::Node& node, T& out, const Fields<T>& fields);

  template <class T>
  void read_list(const YAML::Node& node, std::vector<T>& out, const Fields<T>& fields);

  // Scalars: each reports a type error at the value and leaves `out` as is.
  void read_value(const YAML::Node& node, std::string& out);
  void read_value(const YAML::Node& node, bool& out);
  void read_value(const YAML::Node& node, int& out);
  void read_value(const YAML::Node& node, unsigned& out);
  void read_value(const YAML::Node& node, std::uint16_t& out);
  void read_value(const YAML::Node& node, std::optional<int>& out);
  void read_value(const YAML::Node& node, Duration& out);
  void read_value(const YAML::Node& node, Endpoint& out);
  void read_value(const YAML::Node& node, std::vector<std::string>& out);
  void read_size(const YAML::Node& node, std::uint64_t& out);

  template <class E>
    requires std::is_enum_v<E>
  void read_value(const YAML::Node& node, E& out) {
    std::string text;
    if (!read_scalar(node, "one of: " + policy::enum_names_joined<E>(), text)) return;
    if (const auto parsed = policy::parse_enum<E>(text)) {
      out = *parsed;
      return;
    }
    error(node.Mark(), "bad value '" + text + "' for '" + key_name() + "'; valid values: " +
                           policy::enum_names_joined<E>());
  }

  // Reads an integer in [low, high] into any integer type.
  template <class I>
  void read_integer(const YAML::Node& node, I& out, long long low, long long high) {
    std::string text;
    if (!read_scalar(node, "an integer", text)) return;
    long long value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || ptr != text.data() + text.size()) {
      error(node.Mark(), "'" + key_name() + "' must be an integer, got '" + text + "'");
      return;
    }
    if (value < low || value > high) {
      error(node.Mark(), "'" + key_name() + "' must be between " + std::to_string(low) +
                             " and " + std::to_string(high) + ", got " + text);
      return;
    }
    out = static_cast<I>(value);
  }

 private:
  // The last segment of the current path, as written in the file.
  std::string key_name() const;
  bool read_scalar(const YAML::Node& node, const std::string& expected, std::string& out);
  void report_unknown_key(const YAML::Node& key, const std::vector<std::string_view>& valid);

  std::string file_;
  std::vector<ConfigError>& errors_;
  SourceMap& positions_;
  std::vector<std::string> path_{""};
};

template <class T>
void YamlReader::read_struct(const YAML::Node& node, T& out, const Fields<T>& fields) {
  std::vector<std::string_view> valid;
  for (const auto& field : fields) valid.push_back(field.key);
  if (!node.IsMap()) {
    std::string keys;
    for (auto k : valid) keys += (keys.empty() ? "" : ", ") + std::string(k);
    error(node.Mark(), "expected a mapping with keys: " + keys);
    return;
  }
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const auto& key = entry.first;
    if (!key.IsScalar()) {
      error(key.Mark(), "a key must be a plain name");
      continue;
    }
    const auto& name = key.Scalar();
    if (!seen.insert(name).second) {
      error(key.Mark(), "duplicate key '" + name + "'");
      continue;
    }
    const auto field = std::find_if(fields.begin(), fields.end(),
                                    [&](const Field<T>& f) { return f.key == name; });
    if (field == fields.end()) {
      report_unknown_key(key, valid);
      continue;
    }
    enter(name, key.Mark());
    field->read(*this, entry.second, out);
    leave();
  }
}

template <class T>
void YamlReader::read_list(const YAML::Node& node, std::vector<T>& out, const Fields<T>& fields) {
  if (!node.IsSequence()) {
    error(node.Mark(), "'" + key_name() + "' must be a list");
    return;
  }
  out.clear();
  for (std::size_t i = 0; i < node.size(); ++i) {
    const auto item = node[i];
    T value{};
    if constexpr (requires { value.source_line; }) value.source_line = item.Mark().line + 1;
    enter("[" + std::to_string(i) + "]", item.Mark());
    read_struct(item, value, fields);
    leave();
    out.push_back(std::move(value));
  }
}

// Field-table builders.

template <class T, class M>
Field<T> field(std::string_view key, M T::*member) {
  return {key, [member](YamlReader& r, const YAML::Node& n, T& out) { r.read_value(n, out.*member); }};
}

// A byte count: "64KiB", "1MiB" or a plain number of bytes.
template <class T>
Field<T> size_field(std::string_view key, std::uint64_t T::*member) {
  return {key, [member](YamlReader& r, const YAML::Node& n, T& out) { r.read_size(n, out.*member); }};
}

template <class T, class I>
Field<T> integer_field(std::string_view key, I T::*member, long long low, long long high) {
  return {key, [=](YamlReader& r, const YAML::Node& n, T& out) {
            r.read_integer(n, out.*member, low, high);
          }};
}

// Appends "prefix.key" for every key in `fields`, recursively.
template <class T>
void collect_key_paths(const Fields<T>& fields, const std::string& prefix, std::vector<std::string>& out) {
  for (const auto& field : fields) {
    const auto path = prefix.empty() ? std::string(field.key) : prefix + "." + std::string(field.key);
    out.push_back(path);
    if (field.list_children) field.list_children(path, out);
  }
}

template <class T, class M>
Field<T> nested_field(std::string_view key, M T::*member, const Fields<M>& fields) {
  return {key,
          [member, &fields](YamlReader& r, const YAML::Node& n, T& out) { r.read_struct(n, out.*member, fields); },
          [&fields](const std::string& prefix, std::vector<std::string>& out) {
            collect_key_paths(fields, prefix, out);
          }};
}

template <class T, class M>
Field<T> list_field(std::string_view key, std::vector<M> T::*member, const Fields<M>& fields) {
  return {key,
          [member, &fields](YamlReader& r, const YAML::Node& n, T& out) { r.read_list(n, out.*member, fields); },
          [&fields](const std::string& prefix, std::vector<std::string>& out) {
            collect_key_paths(fields, prefix + "[]", out);
          }};
}

}  // namespace idemgate::config::detail
