// idemgate's command line: wires the layers together and does nothing else.
#include "config/check.hpp"
#include "config/config.hpp"
#include "proxy/auth_cli.hpp"
#include "proxy/ops_cli.hpp"
#include "proxy/server.hpp"
#include "tls/ca.hpp"

#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#ifndef IDEMGATE_VERSION
#define IDEMGATE_VERSION "0.0.0"
#endif

namespace {

constexpr std::string_view kUsage =
    "usage:\n"
    "  idemgate --version\n"
    "  idemgate serve --config FILE [--port-file FILE] [--admin-port-file FILE]\n"
    "  idemgate check-config FILE\n"
    "  idemgate ca init [--dir DIR] [--force]\n"
    "  idemgate auth add-user FILE NAME [--iterations N]   (password on stdin)\n"
    "  idemgate ledger migrate --config FILE\n"
    "  idemgate escalations list|resolve ... --config FILE\n"
    "  idemgate intents show (--key K | --id N | --run R) --config FILE\n"
    "  idemgate runs show|unfreeze|kill RUN --config FILE\n";

int usage_error(std::string_view why) {
  std::cerr << "idemgate: " << why << "\n" << kUsage;
  return 2;
}

int run_serve(const std::vector<std::string_view>& args) {
  idemgate::proxy::ServeOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size())
      options.config_path = std::string(args[++i]);
    else if (args[i] == "--port-file" && i + 1 < args.size())
      options.port_file = std::string(args[++i]);
    else if (args[i] == "--admin-port-file" && i + 1 < args.size())
      options.admin_port_file = std::string(args[++i]);
    else
      return usage_error("serve: unexpected argument '" + std::string(args[i]) + "'");
  }
  if (options.config_path.empty()) return usage_error("serve needs --config FILE");
  auto loaded = idemgate::config::load_file(options.config_path);
  if (!loaded.config) {
    for (auto const& e : loaded.errors) std::cerr << idemgate::config::format(e) << "\n";
    std::cerr << "idemgate: not serving: " << loaded.errors.size() << " error(s) in " << options.config_path << "\n";
    return 2;
  }
  return idemgate::proxy::serve(loaded.config, options);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) return usage_error("no command");
  auto const cmd = args.front();
  std::vector<std::string_view> rest(args.begin() + 1, args.end());
  if (cmd == "--version" || cmd == "version") {
    std::cout << "idemgate " << IDEMGATE_VERSION << "\n";
    return 0;
  }
  if (cmd == "--help" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "serve") return run_serve(rest);
  if (cmd == "check-config") {
    if (rest.size() != 1) return usage_error("check-config needs exactly one FILE");
    return idemgate::config::check_config_main(std::string(rest.front()), std::cout, std::cerr);
  }
  if (cmd == "ca" && !rest.empty() && rest.front() == "init") {
    std::vector<std::string_view> ca_args(rest.begin() + 1, rest.end());
    return idemgate::tls::ca_init_main(std::span<const std::string_view>(ca_args), std::cout, std::cerr);
  }
  if (cmd == "auth") return idemgate::proxy::auth_main(std::span<const std::string_view>(rest), std::cin, std::cout, std::cerr);
  if (idemgate::proxy::is_ops_command(args)) return idemgate::proxy::run_ops_command(args, std::cout, std::cerr);
  return usage_error("unknown command '" + std::string(cmd) + "'");
}
