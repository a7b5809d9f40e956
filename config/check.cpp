// The check-config command, kept here so the proxy's main only wires it.
#include "config/check.hpp"

#include "config/config.hpp"
#include "config/warnings.hpp"

namespace idemgate::config {

int check_config_main(const std::string& path, std::ostream& out, std::ostream& err) {
  const auto result = load_file(path);
  if (!result.errors.empty()) {
    for (const auto& error : result.errors) err << format(error) << '\n';
    return 2;
  }
  for (const auto& warning : warnings(*result.config)) err << "warning: " << format(warning) << '\n';
  const auto count = result.config->tools.size();
  out << "ok: " << count << " tools\n";
  return 0;
}

}  // namespace idemgate::config
