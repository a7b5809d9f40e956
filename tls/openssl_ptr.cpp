// Turns OpenSSL's thread-local error queue into one readable line.
#include "tls/openssl_ptr.hpp"

#include <openssl/err.h>

#include <array>

namespace idemgate::tls {

std::string openssl_error(std::string_view what) {
  std::string out(what);
  unsigned long code = ERR_get_error();
  if (code != 0) {
    std::array<char, 256> text{};
    ERR_error_string_n(code, text.data(), text.size());
    out += ": ";
    out += text.data();
  }
  ERR_clear_error();
  return out;
}

}  // namespace idemgate::tls
