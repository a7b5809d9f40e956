// `idemgate check-config FILE`: validates a config file without serving.
#pragma once

#include <ostream>
#include <string>

namespace idemgate::config {

// Prints "ok: N tools" to `out` (and any warnings, "warning: file:line:..."
// to `err`) and returns 0, or prints every error, one per line as
// file:line:column: message, to `err` and returns 2.
int check_config_main(const std::string& path, std::ostream& out, std::ostream& err);

}  // namespace idemgate::config
