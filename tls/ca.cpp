// Creating, writing and loading idemgate's CA.
#include "tls/ca.hpp"

#include "tls/secret_file.hpp"
#include "tls/x509_builder.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>


#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <ostream>
#include <sstream>

namespace idemgate::tls {

namespace fs = std::filesystem;

namespace {

constexpr std::chrono::seconds ca_lifetime{std::chrono::hours(24 * 3652)};  // 10 years

std::string errno_text(int err) { return std::strerror(err); }

template <class Write>
Result<std::string> to_pem(Write write, const char* what) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || write(bio.get()) != 1)
    return Result<std::string>::failure(openssl_error(std::string("encoding the ") + what));
  char* data = nullptr;
  long size = BIO_get_mem_data(bio.get(), &data);
  return {std::string(data, static_cast<std::size_t>(size)), {}};
}

Result<std::string> read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Result<std::string>::failure("cannot open " + std::string(what) + " " + path + ": " +
                                        errno_text(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return {text.str(), {}};
}

struct NewCa {
  EvpPkeyPtr key;
  X509Ptr cert;
};

Result<NewCa> build_ca() {
  using R = Result<NewCa>;
  auto key = generate_p256_key();
  if (!key.ok()) return R::failure(key.error);

  // A per-CA suffix keeps two installations' CAs apart in one trust store.
  std::array<unsigned char, 4> tag{};
  RAND_bytes(tag.data(), static_cast<int>(tag.size()));
  char suffix[9];
  std::snprintf(suffix, sizeof suffix, "%02x%02x%02x%02x", tag[0], tag[1], tag[2], tag[3]);

  auto cert = new_certificate(std::string("idemgate interception CA ") + suffix, key.value.get(),
                              nullptr, ca_lifetime);
  if (!cert.ok()) return R::failure(cert.error);
  X509* x = cert.value.get();
  bool ok = add_extension(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
            add_extension(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") &&
            add_extension(x, x, NID_subject_key_identifier, "hash") &&
            add_extension(x, x, NID_authority_key_identifier, "keyid:always") &&
            sign_certificate(x, key.value.get());
  if (!ok) return R::failure(openssl_error("building the CA certificate"));
  return {NewCa{std::move(key.value), std::move(cert.value)}, {}};
}

// Paths go into shell lines the user pastes; quote what the shell would split.
std::string shell_quote(const std::string& s) {
  bool plain = !s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                 "0123456789/._-+:,@") == std::string::npos;
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Result<CaFiles> create_ca(const fs::path& dir, bool force) {
  using R = Result<CaFiles>;
  CaFiles files{dir / ca_cert_file_name, dir / ca_key_file_name};

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return R::failure("cannot create " + dir.string() + ": " + ec.message());
  if (!force) {
    for (const fs::path& p : {files.cert, files.key}) {
      if (fs::exists(fs::symlink_status(p, ec)))
        return R::failure(p.string() +
                          " already exists; pass --force to replace it (clients that trust "
                          "the old CA will then reject the proxy)");
    }
  }

  auto ca = build_ca();
  if (!ca.ok()) return R::failure(ca.error);
  auto key_pem = to_pem(
      [&](BIO* b) {
        return PEM_write_bio_PrivateKey(b, ca.value.key.get(), nullptr, nullptr, 0, nullptr,
                                        nullptr);
      },
      "CA key");
  auto cert_pem = to_pem([&](BIO* b) { return PEM_write_bio_X509(b, ca.value.cert.get()); },
                         "CA certificate");
  if (!key_pem.ok()) return R::failure(key_pem.error);
  if (!cert_pem.ok()) return R::failure(cert_pem.error);

  // The key first: a certificate without its key is useless, and a reader
  // that sees the new certificate must find the matching key already there.
  if (auto why = place_file(files.key, key_pem.value, 0600, force); !why.empty())
    return R::failure(why);
  if (auto why = place_file(files.cert, cert_pem.value, 0644, force); !why.empty())
    return R::failure(why);
  return {files, {}};
}

Result<CaPtr> load_ca(const std::string& cert_path, const std::string& key_path) {
  using R = Result<CaPtr>;
  const std::string hint = " (create one with `idemgate ca init`)";
  auto cert_pem = read_file(cert_path, "CA certificate");
  if (!cert_pem.ok()) return R::failure(cert_pem.error + hint);
  auto key_pem = read_file(key_path, "CA key");
  if (!key_pem.ok()) return R::failure(key_pem.error + hint);

  auto ca = std::make_shared<CertificateAuthority>();
  BioPtr cert_bio(BIO_new_mem_buf(cert_pem.value.data(), static_cast<int>(cert_pem.value.size())));
  ca->cert.reset(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (!ca->cert) return R::failure(openssl_error(cert_path + " holds no PEM certificate"));
  BioPtr key_bio(BIO_new_mem_buf(key_pem.value.data(), static_cast<int>(key_pem.value.size())));
  ca->key.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!ca->key)
    return R::failure(openssl_error(key_path + " holds no unencrypted PEM private key"));

  if (X509_check_private_key(ca->cert.get(), ca->key.get()) != 1)
    return R::failure(openssl_error(key_path + " is not the key of " + cert_path));
  if (X509_check_ca(ca->cert.get()) == 0)
    return R::failure(cert_path + " is not a CA certificate (no basicConstraints CA:TRUE)");
  if (X509_cmp_current_time(X509_get0_notAfter(ca->cert.get())) <= 0)
    return R::failure(cert_path + " has expired; replace it with `idemgate ca init --force`");
  ERR_clear_error();
  return {std::move(ca), {}};
}

int ca_init_main(const fs::path& dir, bool force, std::ostream& out, std::ostream& err) {
  auto created = create_ca(dir, force);
  if (!created.ok()) {
    err << "idemgate ca init: " << created.error << "\n";
    return 1;
  }
  std::error_code ec;
  const std::string cert = shell_quote(fs::absolute(created.value.cert, ec).lexically_normal());
  const std::string key = fs::absolute(created.value.key, ec).lexically_normal();
  out << "Created the idemgate CA.\n"
      << "  certificate: " << cert << "\n"
      << "  private key: " << key << " (mode 0600: keep it secret)\n"
      << "Point config tls.ca_cert and tls.ca_key at these files, then trust the certificate "
         "in clients:\n"
      << "export SSL_CERT_FILE=" << cert << "\n"
      << "export REQUESTS_CA_BUNDLE=" << cert << "\n"
      << "export NODE_EXTRA_CA_CERTS=" << cert << "\n"
      << "curl --cacert " << cert << " ...\n"
      << "SSL_CERT_FILE and REQUESTS_CA_BUNDLE replace the system trust store; when the "
         "proxy also tunnels hosts it does not intercept, point them at a bundle instead:\n"
      << "  cat /etc/ssl/certs/ca-certificates.crt " << cert << " > idemgate-bundle.pem\n";
  return 0;
}

int ca_init_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  fs::path dir = default_ca_dir;
  bool force = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--force") {
      force = true;
    } else if (args[i] == "--dir" && i + 1 < args.size()) {
      dir = args[++i];
    } else if (args[i].starts_with("--dir=")) {
      dir = args[i].substr(6);
    } else {
      err << "idemgate ca init: unexpected argument '" << args[i]
          << "'\nusage: idemgate ca init [--dir DIR] [--force]\n";
      return 2;
    }
  }
  return ca_init_main(dir, force, out, err);
}

}  // namespace idemgate::tls
