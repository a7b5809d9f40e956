// Certificate building blocks shared by ca.cpp and leaf_minter.cpp.
#include "tls/x509_builder.hpp"

#include <openssl/rand.h>

#include <array>

namespace idemgate::tls {

Result<EvpPkeyPtr> generate_p256_key() {
  EvpPkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return Result<EvpPkeyPtr>::failure(openssl_error("generating a P-256 key"));
  return {std::move(key), {}};
}

namespace {

// RFC 5280 caps serials at 20 octets and wants them positive; 16 random
// octets with the top bit cleared are positive, unique in practice, and
// unpredictable (which is what defeats chosen-prefix collisions).
Asn1IntegerPtr random_serial() {
  std::array<unsigned char, 16> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) return nullptr;
  bytes[0] &= 0x7f;
  bytes[15] |= 0x01;  // never zero
  BignumPtr bn(BN_bin2bn(bytes.data(), static_cast<int>(bytes.size()), nullptr));
  if (!bn) return nullptr;
  return Asn1IntegerPtr(BN_to_ASN1_INTEGER(bn.get(), nullptr));
}

bool add_name_entry(X509_NAME* name, const char* field, const std::string& value) {
  return X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                    reinterpret_cast<const unsigned char*>(value.data()),
                                    static_cast<int>(value.size()), -1, 0) == 1;
}

}  // namespace

Result<X509Ptr> new_certificate(const std::string& common_name, EVP_PKEY* subject_key,
                                X509* issuer, std::chrono::seconds lifetime) {
  using R = Result<X509Ptr>;
  X509Ptr cert(X509_new());
  if (!cert) return R::failure(openssl_error("allocating a certificate"));
  auto serial = random_serial();
  if (!serial) return R::failure(openssl_error("drawing a random serial"));

  X509_NAME* subject = X509_get_subject_name(cert.get());
  // ub-common-name is 64 characters; longer host names live in the SAN only.
  bool named = add_name_entry(subject, "O", "idemgate") &&
               (common_name.size() > 64 || add_name_entry(subject, "CN", common_name));
  X509_NAME* issuer_name = issuer ? X509_get_subject_name(issuer) : subject;

  bool built = X509_set_version(cert.get(), X509_VERSION_3) == 1 &&
               X509_set_serialNumber(cert.get(), serial.get()) == 1 && named &&
               X509_set_issuer_name(cert.get(), issuer_name) == 1 &&
               X509_gmtime_adj(X509_getm_notBefore(cert.get()), -backdate.count()) &&
               X509_gmtime_adj(X509_getm_notAfter(cert.get()), lifetime.count()) &&
               X509_set_pubkey(cert.get(), subject_key) == 1;
  if (!built) return R::failure(openssl_error("building a certificate"));
  return {std::move(cert), {}};
}

bool add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  return ext && X509_add_ext(cert, ext.get(), -1) == 1;
}

bool sign_certificate(X509* cert, EVP_PKEY* issuer_key) {
  return X509_sign(cert, issuer_key, EVP_sha256()) > 0;
}

}  // namespace idemgate::tls
