// The operator's commands on the ledger: ledger migrate, escalations
// list|resolve, intents show, runs show|unfreeze|kill. They open the store
// directly (no server needed) and print JSON lines.
#pragma once

#include <iosfwd>
#include <span>
#include <string_view>

namespace idemgate::proxy {

// args: the words after "idemgate" (e.g. {"escalations", "list", "--config", "F"}).
// Returns the exit code: 0 ok, 1 ledger error, 2 usage error.
int run_ops_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

// Is args[0] (and args[1]) one of the commands above?
bool is_ops_command(std::span<const std::string_view> args);

}  // namespace idemgate::proxy
