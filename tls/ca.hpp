// idemgate's own certificate authority: created once by `idemgate ca init`,
// loaded at start-up, and used by the leaf minter to sign a certificate for
// each intercepted host.
#pragma once

#include "tls/openssl_ptr.hpp"

#include <filesystem>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace idemgate::tls {

// Immutable once loaded; shared by the minter threads (OpenSSL only reads
// a certificate and a key when signing).
struct CertificateAuthority {
  X509Ptr cert;
  EvpPkeyPtr key;
};
using CaPtr = std::shared_ptr<const CertificateAuthority>;

inline constexpr const char* default_ca_dir = "./var";
inline constexpr const char* ca_cert_file_name = "ca.pem";
inline constexpr const char* ca_key_file_name = "ca.key";

struct CaFiles {
  std::filesystem::path cert;  // dir/ca.pem
  std::filesystem::path key;   // dir/ca.key, mode 0600
};

// Writes a new CA (ECDSA P-256, CA:TRUE critical with pathlen 0, keyCertSign
// and cRLSign critical, 10 years) into `dir`, creating it if needed.
// Refuses when either file exists unless `force`.
Result<CaFiles> create_ca(const std::filesystem::path& dir, bool force);

// Reads the pair named by config `tls.ca_cert` / `tls.ca_key`; the error
// says which file is wrong and how.
Result<CaPtr> load_ca(const std::string& cert_path, const std::string& key_path);

// `idemgate ca init [--dir D] [--force]`: creates the CA and prints what
// clients need to trust it. Returns the process exit status.
int ca_init_main(const std::filesystem::path& dir, bool force, std::ostream& out,
                 std::ostream& err);
// The same, parsing the arguments after "ca init".
int ca_init_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace idemgate::tls
