// RAII owners for the OpenSSL objects tls/ creates, the result type its
// fallible calls return, and the reader that turns OpenSSL's thread-local
// error queue into one line for a log or a problem detail.
#pragma once

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>
#include <string_view>

namespace idemgate::tls {

template <auto Free>
struct OpensslFree {
  template <class T>
  void operator()(T* p) const noexcept {
    Free(p);
  }
};

using X509Ptr = std::unique_ptr<X509, OpensslFree<&X509_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpensslFree<&EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, OpensslFree<&BIO_free_all>>;
using BignumPtr = std::unique_ptr<BIGNUM, OpensslFree<&BN_free>>;
using Asn1IntegerPtr = std::unique_ptr<ASN1_INTEGER, OpensslFree<&ASN1_INTEGER_free>>;
using Asn1OctetStringPtr = std::unique_ptr<ASN1_OCTET_STRING, OpensslFree<&ASN1_OCTET_STRING_free>>;
using X509ExtensionPtr = std::unique_ptr<X509_EXTENSION, OpensslFree<&X509_EXTENSION_free>>;
using GeneralNamesPtr = std::unique_ptr<GENERAL_NAMES, OpensslFree<&GENERAL_NAMES_free>>;
using X509StorePtr = std::unique_ptr<X509_STORE, OpensslFree<&X509_STORE_free>>;
using X509StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, OpensslFree<&X509_STORE_CTX_free>>;

// A value or the reason there is none. `error` is empty on success.
template <class T>
struct Result {
  T value{};
  std::string error;

  bool ok() const noexcept { return error.empty(); }
  static Result failure(std::string why) { return Result{T{}, std::move(why)}; }
};

// "what: <first queued OpenSSL error>" and clears the queue, so a later call
// on this thread does not report a stale error.
std::string openssl_error(std::string_view what);

}  // namespace idemgate::tls
