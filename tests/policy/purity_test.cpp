// policy/ is pure and sans-I/O (STYLE.md): no Asio, Beast, SQL or yaml-cpp
// include may creep into it.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

TEST_CASE("policy/ includes no Asio, Beast, SQL or yaml-cpp headers") {
  const char* const forbidden[] = {"boost/asio", "boost/beast", "sqlite3.h", "pqxx", "yaml-cpp"};
  int files = 0;
  for (const auto& entry : fs::directory_iterator(IDEMGATE_SOURCE_DIR "/policy")) {
    const auto ext = entry.path().extension();
    if (ext != ".hpp" && ext != ".cpp") continue;
    ++files;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      if (!line.starts_with("#include")) continue;
      for (const char* header : forbidden)
        CHECK_MESSAGE(line.find(header) == std::string::npos, entry.path().filename().string() << ": " << line);
    }
  }
  CHECK(files > 10);
}
