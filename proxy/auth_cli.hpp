// `idemgate auth add-user FILE NAME [--iterations N]`: adds a user to a
// proxy users file (auth.users_file), the password read from stdin (one
// line), stored as a salted PBKDF2-HMAC-SHA256 hash; the file is written
// mode 0600, atomically.
#pragma once

#include <iosfwd>
#include <span>
#include <string_view>

namespace idemgate::proxy {

// args: the words after "auth". Returns the exit code: 0 ok, 1 I/O error, 2 usage.
int auth_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace idemgate::proxy
