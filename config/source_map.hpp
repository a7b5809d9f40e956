// Where each key of a loaded config file was written, by dotted path
// ("tools[2].reconcile.mode"), so checks that run after parsing can still
// point at a line and column, and can tell a key written from a default.
#pragma once

#include <map>
#include <string>

namespace idemgate::config {

struct Position {
  int line = 0;    // 1-based; 0 when unknown
  int column = 0;  // 1-based
};

class SourceMap {
 public:
  void record(const std::string& path, Position where) { positions_[path] = where; }
  bool written(const std::string& path) const { return positions_.count(path) != 0; }
  const std::map<std::string, Position>& positions() const { return positions_; }

  // The position of `path`, else of its nearest recorded parent, else {0, 0}.
  Position find(std::string path) const {
    for (;;) {
      if (const auto it = positions_.find(path); it != positions_.end()) return it->second;
      const auto cut = path.find_last_of(".[");
      if (cut == std::string::npos) return {};
      path.resize(cut);
    }
  }

 private:
  std::map<std::string, Position> positions_;
};

}  // namespace idemgate::config
