// Proxy authentication, the pure part: Basic credentials out of a
// Proxy-Authorization value, the users file's lines (salted PBKDF2-HMAC-
// SHA256 hashes), and the check of a password against one, compared in
// constant time. The I/O (which thread hashes, the cache of verified
// credentials) lives in proxy/proxy_auth.*.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace idemgate::policy {

struct BasicCredentials {
  std::string user;
  std::string password;
};

// "Basic dXNlcjpwYXNz" (scheme case-insensitive) -> {user, pass}; nullopt
// for another scheme, bad base64 or no ':'.
std::optional<BasicCredentials> parse_basic(std::string_view header_value);

// One line of the users file: NAME:pbkdf2-sha256$ITERATIONS$SALT_HEX$HASH_HEX
struct UserEntry {
  std::string name;
  unsigned iterations = 0;
  std::string salt;  // raw bytes
  std::string hash;  // raw bytes, 32
  std::string line;  // the line as written (identifies the entry's version)
};

inline constexpr unsigned default_pbkdf2_iterations = 600000;  // OWASP 2023 for PBKDF2-HMAC-SHA256

// An entry, or what is wrong with the line. Blank lines and '#' comments are
// for the caller to skip.
std::variant<UserEntry, std::string> parse_user_line(std::string_view line);

// The line for `name` with `password`, hashed with `salt` (16 random bytes
// from the caller).
std::string make_user_line(std::string_view name, std::string_view password, std::string_view salt,
                           unsigned iterations = default_pbkdf2_iterations);

// PBKDF2 of `password` with the entry's salt and iterations equals its hash
// (CRYPTO_memcmp: the time does not depend on where they differ).
bool verify_password(const UserEntry& entry, std::string_view password) noexcept;

// A user name may name a run: no ':' (it ends the name in Basic), no control
// characters, 1-128 bytes.
std::optional<std::string> user_name_error(std::string_view name);

const UserEntry* find_user(const std::vector<UserEntry>& users, std::string_view name) noexcept;

}  // namespace idemgate::policy
