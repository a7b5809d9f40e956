// Every tests/config/bad/*.yaml declares, in "# expect: LINE: MESSAGE"
// comments, each error it must produce; the loader must produce exactly
// those (line and message), no more and no fewer.
#include "config/config.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace idemgate;
namespace fs = std::filesystem;

namespace {

struct Expected {
  int line = 0;
  std::string message;
};

std::vector<Expected> expectations(const fs::path& file) {
  std::vector<Expected> out;
  std::ifstream in(file);
  const std::string marker = "# expect: ";
  for (std::string text; std::getline(in, text);) {
    if (!text.starts_with(marker)) continue;
    const auto colon = text.find(": ", marker.size());
    out.push_back({std::stoi(text.substr(marker.size(), colon - marker.size())), text.substr(colon + 2)});
  }
  return out;
}

}  // namespace

TEST_CASE("each bad config yields exactly the errors it declares") {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(IDEMGATE_SOURCE_DIR "/tests/config/bad"))
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 30);

  for (const auto& file : files) {
    SUBCASE(file.filename().string().c_str()) {
      const auto expected = expectations(file);
      REQUIRE_MESSAGE(!expected.empty(), "no '# expect:' line in " << file);
      const auto result = config::load_file(file.string());
      std::string got;
      for (const auto& e : result.errors) got += config::format(e) + "\n";
      INFO("errors:\n" << got);
      CHECK_FALSE(result.config);
      CHECK(result.errors.size() == expected.size());
      for (const auto& want : expected) {
        const bool found = std::any_of(result.errors.begin(), result.errors.end(), [&](const config::ConfigError& e) {
          return e.line == want.line && e.message == want.message && e.file == file.string() && e.column > 0;
        });
        CHECK_MESSAGE(found, "expected " << want.line << ": " << want.message);
      }
    }
  }
}
