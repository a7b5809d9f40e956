// The certificate building blocks the CA and the leaf minter share: a P-256
// key, a v3 certificate skeleton with a random serial and a backdated
// validity, extensions from OpenSSL's config syntax, and the signature.
#pragma once

#include "tls/openssl_ptr.hpp"

#include <chrono>
#include <string>

namespace idemgate::tls {

// Clients on a machine whose clock runs a little behind ours must still
// accept a certificate minted a moment ago.
inline constexpr std::chrono::seconds backdate{3600};

Result<EvpPkeyPtr> generate_p256_key();

// A v3 certificate for `subject_key`: random 128-bit serial, subject
// O=idemgate + CN=common_name (left out when longer than X.509 allows),
// valid from now - backdate to now + lifetime. `issuer` null: self-issued.
Result<X509Ptr> new_certificate(const std::string& common_name, EVP_PKEY* subject_key,
                                X509* issuer, std::chrono::seconds lifetime);

// Adds one extension written as in openssl.cnf ("critical,CA:TRUE").
// `issuer` is the cert itself for a self-signed one (key identifiers).
bool add_extension(X509* cert, X509* issuer, int nid, const char* value);

bool sign_certificate(X509* cert, EVP_PKEY* issuer_key);

}  // namespace idemgate::tls
