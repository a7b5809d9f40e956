// idemgate ca init: the CA's properties read back with OpenSSL, the key
// file's mode, refusal to overwrite, --force, load errors, the CLI output.
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <sstream>
#include <vector>

using namespace idemgate::tls;
using idemgate::tls::test::read_cert;
using idemgate::tls::test::slurp;
using idemgate::tls::test::TempDir;

namespace {

unsigned file_mode(const std::filesystem::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

bool extension_critical(X509* cert, int nid) {
  int at = X509_get_ext_by_NID(cert, nid, -1);
  REQUIRE(at >= 0);
  return X509_EXTENSION_get_critical(X509_get_ext(cert, at)) == 1;
}

}  // namespace

TEST_CASE("create_ca writes a P-256 CA with CA:TRUE, pathlen 0 and keyCertSign") {
  TempDir dir;
  auto created = create_ca(dir.path(), false);
  REQUIRE_MESSAGE(created.ok(), created.error);
  CHECK(created.value.cert == dir.path() / "ca.pem");
  CHECK(created.value.key == dir.path() / "ca.key");

  X509Ptr cert = read_cert(created.value.cert);
  REQUIRE(cert);
  CHECK(X509_get_version(cert.get()) == X509_VERSION_3);
  CHECK(X509_check_ca(cert.get()) == 1);

  int critical = 0;
  auto* bc = static_cast<BASIC_CONSTRAINTS*>(
      X509_get_ext_d2i(cert.get(), NID_basic_constraints, &critical, nullptr));
  REQUIRE(bc);
  CHECK(bc->ca != 0);
  REQUIRE(bc->pathlen);
  CHECK(ASN1_INTEGER_get(bc->pathlen) == 0);
  CHECK(critical == 1);
  BASIC_CONSTRAINTS_free(bc);

  std::uint32_t usage = X509_get_key_usage(cert.get());
  CHECK((usage & KU_KEY_CERT_SIGN) != 0);
  CHECK((usage & KU_CRL_SIGN) != 0);
  CHECK((usage & KU_DIGITAL_SIGNATURE) == 0);
  CHECK(extension_critical(cert.get(), NID_key_usage));
  CHECK(X509_get0_subject_key_id(cert.get()) != nullptr);

  EVP_PKEY* pub = X509_get0_pubkey(cert.get());
  REQUIRE(pub);
  CHECK(EVP_PKEY_is_a(pub, "EC"));
  char group[64] = {};
  REQUIRE(EVP_PKEY_get_group_name(pub, group, sizeof group, nullptr) == 1);
  CHECK(std::string(group) == "prime256v1");
  CHECK(X509_verify(cert.get(), pub) == 1);  // self-signed

  BignumPtr serial(ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert.get()), nullptr));
  CHECK(BN_num_bits(serial.get()) > 100);  // random 128-bit, top bit clear
  CHECK(BN_is_negative(serial.get()) == 0);

  int days = 0, seconds = 0;
  REQUIRE(ASN1_TIME_diff(&days, &seconds, X509_get0_notBefore(cert.get()),
                         X509_get0_notAfter(cert.get())) == 1);
  CHECK(days >= 3650);
  CHECK(X509_cmp_current_time(X509_get0_notBefore(cert.get())) < 0);  // already valid

  CHECK(file_mode(created.value.key) == 0600);

  // Nothing but the two files: no temp file is left behind.
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"ca.key", "ca.pem"});
}

TEST_CASE("create_ca refuses to overwrite without force and replaces with it") {
  TempDir dir;
  auto first = create_ca(dir.path(), false);
  REQUIRE(first.ok());
  const std::string cert_before = slurp(first.value.cert);
  const std::string key_before = slurp(first.value.key);

  auto again = create_ca(dir.path(), false);
  CHECK_FALSE(again.ok());
  CHECK(again.error.find("--force") != std::string::npos);
  CHECK(slurp(first.value.cert) == cert_before);
  CHECK(slurp(first.value.key) == key_before);

  // A permissive umask must not widen the key file.
  mode_t old_mask = ::umask(0);
  auto forced = create_ca(dir.path(), true);
  ::umask(old_mask);
  REQUIRE_MESSAGE(forced.ok(), forced.error);
  CHECK(slurp(forced.value.cert) != cert_before);
  CHECK(slurp(forced.value.key) != key_before);
  CHECK(file_mode(forced.value.key) == 0600);
  CHECK(load_ca(forced.value.cert, forced.value.key).ok());
}

TEST_CASE("create_ca refuses when only the key exists") {
  TempDir dir;
  { std::ofstream(dir.path() / "ca.key") << "old"; }
  auto created = create_ca(dir.path(), false);
  CHECK_FALSE(created.ok());
  CHECK(slurp(dir.path() / "ca.key") == "old");
  CHECK_FALSE(std::filesystem::exists(dir.path() / "ca.pem"));
}

TEST_CASE("create_ca creates a missing directory") {
  TempDir dir;
  auto created = create_ca(dir.path() / "a" / "b", false);
  REQUIRE_MESSAGE(created.ok(), created.error);
  CHECK(std::filesystem::exists(dir.path() / "a" / "b" / "ca.pem"));
}

TEST_CASE("load_ca reads the pair back and says which file is wrong") {
  TempDir one, two;
  auto a = create_ca(one.path(), false);
  auto b = create_ca(two.path(), false);
  REQUIRE(a.ok());
  REQUIRE(b.ok());

  auto loaded = load_ca(a.value.cert, a.value.key);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error);
  CHECK(X509_check_private_key(loaded.value->cert.get(), loaded.value->key.get()) == 1);

  auto missing = load_ca((one.path() / "nope.pem").string(), a.value.key);
  CHECK_FALSE(missing.ok());
  CHECK(missing.error.find("nope.pem") != std::string::npos);
  CHECK(missing.error.find("idemgate ca init") != std::string::npos);

  auto mismatched = load_ca(a.value.cert, b.value.key);
  CHECK_FALSE(mismatched.ok());
  CHECK(mismatched.error.find("is not the key of") != std::string::npos);

  auto not_pem = load_ca(a.value.key, a.value.key);
  CHECK_FALSE(not_pem.ok());
  CHECK(not_pem.error.find("no PEM certificate") != std::string::npos);
}

TEST_CASE("ca init prints the lines clients need and refuses a second run") {
  TempDir dir;
  std::ostringstream out, err;
  REQUIRE(ca_init_main(dir.path(), false, out, err) == 0);
  const std::string text = out.str();
  const std::string cert = (dir.path() / "ca.pem").string();
  CHECK(text.find("export SSL_CERT_FILE=" + cert + "\n") != std::string::npos);
  CHECK(text.find("export REQUESTS_CA_BUNDLE=" + cert + "\n") != std::string::npos);
  CHECK(text.find("export NODE_EXTRA_CA_CERTS=" + cert + "\n") != std::string::npos);
  CHECK(text.find("curl --cacert " + cert) != std::string::npos);
  CHECK(err.str().empty());

  std::ostringstream out2, err2;
  CHECK(ca_init_main(dir.path(), false, out2, err2) == 1);
  CHECK(err2.str().find("already exists") != std::string::npos);

  const std::string dir_text = dir.path().string();
  const std::vector<std::string_view> args{"--dir", dir_text, "--force"};
  std::ostringstream out3, err3;
  CHECK(ca_init_main(args, out3, err3) == 0);

  const std::string dir_equals = "--dir=" + (dir.path() / "other").string();
  const std::vector<std::string_view> equals_form{dir_equals};
  std::ostringstream out4, err4;
  CHECK(ca_init_main(equals_form, out4, err4) == 0);
  CHECK(std::filesystem::exists(dir.path() / "other" / "ca.key"));

  for (const std::vector<std::string_view>& bad :
       {std::vector<std::string_view>{"--bogus"}, std::vector<std::string_view>{"--dir"}}) {
    std::ostringstream out5, err5;
    CHECK(ca_init_main(bad, out5, err5) == 2);
    CHECK(err5.str().find("usage") != std::string::npos);
  }
}

TEST_CASE("ca init quotes a path the shell would split") {
  TempDir dir;
  std::ostringstream out, err;
  REQUIRE(ca_init_main(dir.path() / "my dir", false, out, err) == 0);
  CHECK(out.str().find("export SSL_CERT_FILE='" + (dir.path() / "my dir" / "ca.pem").string() +
                       "'\n") != std::string::npos);
}
