// The users file command (see auth_cli.hpp).
#include "proxy/auth_cli.hpp"

#include "policy/proxy_auth.hpp"
#include "tls/secret_file.hpp"

#include <openssl/rand.h>

#include <charconv>
#include <fstream>
#include <istream>
#include <ostream>
#include <sstream>
#include <string>
#include <variant>

namespace idemgate::proxy {

int auth_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err) {
  constexpr std::string_view usage = "usage: idemgate auth add-user FILE NAME [--iterations N]  (password on stdin)\n";
  if (args.size() < 3 || args[0] != "add-user") {
    err << usage;
    return 2;
  }
  const std::string file(args[1]);
  const std::string name(args[2]);
  unsigned iterations = policy::default_pbkdf2_iterations;
  for (std::size_t i = 3; i < args.size(); ++i) {
    if (args[i] == "--iterations" && i + 1 < args.size()) {
      const auto text = args[++i];
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), iterations);
      if (ec != std::errc{} || end != text.data() + text.size() || iterations < 1000 || iterations > 10'000'000) {
        err << "idemgate auth: --iterations must be a number from 1000 to 10000000\n";
        return 2;
      }
    } else {
      err << "idemgate auth: unexpected argument '" << args[i] << "'\n" << usage;
      return 2;
    }
  }
  if (auto why = policy::user_name_error(name)) {
    err << "idemgate auth: " << *why << "\n";
    return 2;
  }
  std::string password;
  std::getline(in, password);
  if (!password.empty() && password.back() == '\r') password.pop_back();
  if (password.empty()) {
    err << "idemgate auth: no password on stdin (one line)\n";
    return 2;
  }

  std::string existing;
  if (std::ifstream current(file, std::ios::binary); current) {
    std::ostringstream text;
    text << current.rdbuf();
    existing = text.str();
  }
  std::istringstream lines(existing);
  for (std::string line; std::getline(lines, line);) {
    if (line.substr(0, line.find(':')) == name) {
      err << "idemgate auth: user '" << name << "' is already in " << file
          << " (remove its line to change the password)\n";
      return 1;
    }
  }
  std::string salt(16, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(salt.data()), static_cast<int>(salt.size())) != 1) {
    err << "idemgate auth: no random bytes for a salt\n";
    return 1;
  }
  const auto entry = policy::make_user_line(name, password, salt, iterations);
  if (entry.empty()) {
    err << "idemgate auth: hashing failed\n";
    return 1;
  }
  if (!existing.empty() && existing.back() != '\n') existing += '\n';
  existing += entry + "\n";
  if (auto why = tls::place_file(file, existing, 0600, true); !why.empty()) {
    err << "idemgate auth: " << why << "\n";
    return 1;
  }
  out << "added user '" << name << "' to " << file << "\n";
  return 0;
}

}  // namespace idemgate::proxy
