// A mangled config file never crashes or throws the loader: it yields a
// config or located errors (seeded mutations of example.yaml).
#include "config/config.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <sstream>

using namespace idemgate;

TEST_CASE("random edits of example.yaml give a config or located errors") {
  std::ifstream in(IDEMGATE_SOURCE_DIR "/config/example.yaml");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string original = text.str();
  REQUIRE_FALSE(original.empty());
  std::mt19937 random(5);
  static constexpr std::string_view inserts = ":{}[]-#\"' \n\tx0*/&!|>%@";
  int with_errors = 0;
  for (int i = 0; i < 400; ++i) {
    std::string mangled = original;
    for (unsigned edits = 1 + random() % 4; edits > 0; --edits) {
      const auto at = random() % mangled.size();
      if (random() % 2) mangled.erase(at, 1 + random() % 3);
      else mangled.insert(at, 1, inserts[random() % inserts.size()]);
    }
    const auto result = config::load_string(mangled, "mangled.yaml");
    CHECK((result.config != nullptr) == result.errors.empty());
    for (const auto& error : result.errors) {
      CHECK(error.line >= 1);
      CHECK_FALSE(error.message.empty());
    }
    with_errors += !result.errors.empty();
  }
  CHECK(with_errors > 100);
}
