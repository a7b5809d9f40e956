// Config warnings (see warnings.hpp).
#include "config/warnings.hpp"

namespace idemgate::config {

std::vector<ConfigError> warnings(const Config& config) {
  std::vector<ConfigError> out;
  if (config.tls.intercept) return out;
  for (auto const& tool : config.tools) {
    if (tool.match.port != 0 && tool.match.port != 443) continue;
    out.push_back({config.source_path, tool.source_line, 0,
                   "tool '" + tool.name + "' (host " + tool.match.host +
                       ") can be called over HTTPS, but tls.intercept is false: a CONNECT to its host is refused "
                       "403 intercept_required. Set tls.intercept: true to guard it over HTTPS (plain http:// "
                       "requests and gateway routes are guarded either way)"});
  }
  return out;
}

}  // namespace idemgate::config
