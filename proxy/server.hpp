// The running proxy: one io_context and one SO_REUSEPORT acceptor per network
// thread (no cross-thread handoff, per-thread upstream pools), signals on the
// main thread: SIGTERM/SIGINT drain, SIGHUP reloads the config off the
// network threads.
#pragma once

#include "config/config.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace idemgate::proxy {

struct ServeOptions {
  std::string config_path;
  std::string port_file;  // when set, the bound port is written here once listening
  std::string admin_port_file;  // the same for the admin listener's port
};

// Serves until drained by a signal. Returns the process exit code.
int serve(std::shared_ptr<const config::Config> cfg, const ServeOptions& options);

}  // namespace idemgate::proxy
