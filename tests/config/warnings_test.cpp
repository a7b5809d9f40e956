// Config warnings: a tool reachable over HTTPS while tls.intercept is off.
#include "config/check.hpp"
#include "config/config.hpp"
#include "config/warnings.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

using namespace idemgate;

namespace {

constexpr char kTools[] =
    "tools:\n"
    "  - name: pay.charge\n"
    "    match: { host: api.pay.test, method: POST, path: /v1/charges }\n"
    "    effect: money\n"
    "  - name: local.ticket\n"
    "    match: { host: 127.0.0.1, port: 9000, method: POST, path: /t }\n"
    "    effect: write\n";

}  // namespace

TEST_CASE("warnings: tools on port 443 or any port, with interception off, at their line") {
  auto r = config::load_string(kTools, "t.yaml");
  REQUIRE(r.errors.empty());
  auto const w = config::warnings(*r.config);
  REQUIRE(w.size() == 1);
  CHECK(w[0].line == 2);
  CHECK(w[0].message.find("pay.charge") != std::string::npos);
  CHECK(w[0].message.find("intercept_required") != std::string::npos);
  CHECK(w[0].message.find("tls.intercept") != std::string::npos);

  auto on = config::load_string(std::string("tls: { intercept: true }\n") + kTools, "t.yaml");
  REQUIRE(on.errors.empty());
  CHECK(config::warnings(*on.config).empty());
}

TEST_CASE("check-config prints the warnings and still succeeds") {
  std::string const path =
      (std::filesystem::temp_directory_path() / ("idemgate-warn-" + std::to_string(::getpid()) + ".yaml")).string();
  {
    std::ofstream f(path);
    f << kTools;
  }
  std::ostringstream out, err;
  CHECK(config::check_config_main(path, out, err) == 0);
  CHECK(out.str() == "ok: 2 tools\n");
  CHECK(err.str().find("warning: " + path + ":2: tool 'pay.charge'") == 0);
  std::filesystem::remove(path);
}
