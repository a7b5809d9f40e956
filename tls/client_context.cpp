// The upstream client TLS context and per-connection verification setup.
#include "tls/client_context.hpp"

#include "tls/host_name.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>

namespace idemgate::tls {

namespace ssl = boost::asio::ssl;

Result<ClientContextPtr> make_client_context(const std::string& upstream_ca_file) {
  using R = Result<ClientContextPtr>;
  try {
    auto context = std::make_shared<ssl::context>(ssl::context::tls_client);
    SSL_CTX* native = context->native_handle();
    SSL_CTX_set_options(native, SSL_OP_NO_COMPRESSION);
    if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1)
      return R::failure(openssl_error("setting TLS 1.2 as the minimum"));
    if (SSL_CTX_set_default_verify_paths(native) != 1)
      return R::failure(openssl_error("loading the system trust store"));
    if (!upstream_ca_file.empty() &&
        SSL_CTX_load_verify_locations(native, upstream_ca_file.c_str(), nullptr) != 1)
      return R::failure(openssl_error("loading tls.upstream_ca_file " + upstream_ca_file));
    // Only HTTP/1.1 is spoken upstream; saying so keeps an h2-preferring
    // server from choosing a protocol the relay cannot read.
    static const unsigned char alpn[] = "\x08http/1.1";
    if (SSL_CTX_set_alpn_protos(native, alpn, sizeof alpn - 1) != 0)
      return R::failure(openssl_error("setting ALPN"));
    SSL_CTX_set_verify(native, SSL_VERIFY_PEER, nullptr);
    return {std::move(context), {}};
  } catch (const std::exception& e) {
    ERR_clear_error();
    return R::failure(std::string("building the upstream TLS context: ") + e.what());
  }
}

namespace {

// OpenSSL drops the peer certificate when verification fails, so the verify
// callback keeps the leaf it rejected (freed with the SSL) for
// describe_handshake_error to name what the upstream actually presented.
void free_rejected(void*, void* cert, CRYPTO_EX_DATA*, int, long, void*) {
  X509_free(static_cast<X509*>(cert));
}

int rejected_cert_index() {
  static const int index =
      SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, free_rejected);
  return index;
}

int keep_rejected_leaf(int preverify_ok, X509_STORE_CTX* store) {
  if (preverify_ok) return preverify_ok;
  auto* ssl = static_cast<SSL*>(
      X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  X509* leaf = X509_STORE_CTX_get0_cert(store);
  if (ssl && leaf && !SSL_get_ex_data(ssl, rejected_cert_index()) && X509_up_ref(leaf) == 1 &&
      SSL_set_ex_data(ssl, rejected_cert_index(), leaf) != 1)
    X509_free(leaf);
  return preverify_ok;
}

}  // namespace

boost::system::error_code prepare_client_ssl(SSL* ssl, std::string_view host_text) {
  auto host = parse_host(host_text);
  if (!host.ok()) return make_error_code(boost::system::errc::invalid_argument);
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  bool ok = false;
  if (host.value.is_ip) {
    ok = X509_VERIFY_PARAM_set1_ip_asc(param, host.value.name.c_str()) == 1;
  } else {
    // "*.example.com" may match "a.example.com", never "a.b.example.com" or "fooexample.com".
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    ok = SSL_set_tlsext_host_name(ssl, host.value.name.c_str()) == 1 &&
         SSL_set1_host(ssl, host.value.name.c_str()) == 1;
  }
  SSL_set_verify(ssl, SSL_VERIFY_PEER, keep_rejected_leaf);
  if (!ok) {
    auto code = static_cast<int>(ERR_get_error());
    ERR_clear_error();
    return {code, boost::asio::error::get_ssl_category()};
  }
  return {};
}

namespace {

// "DNS:localhost, IP:127.0.0.1", or the subject when there is no SAN, so the
// operator sees what the upstream actually presented.
std::string certificate_names(X509* cert) {
  std::string out;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  GeneralNamesPtr owned(names);
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    std::string item;
    if (name->type == GEN_DNS) {
      const ASN1_STRING* s = name->d.dNSName;
      item = "DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                  static_cast<std::size_t>(ASN1_STRING_length(s)));
    } else if (name->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* ip = name->d.iPAddress;
      int family = ASN1_STRING_length(ip) == 4 ? AF_INET : AF_INET6;
      char text[INET6_ADDRSTRLEN] = {};
      if (inet_ntop(family, ASN1_STRING_get0_data(ip), text, sizeof text)) item = std::string("IP:") + text;
    }
    if (item.empty()) continue;
    if (!out.empty()) out += ", ";
    out += item;
  }
  if (out.empty()) {
    char buf[256];
    X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof buf);
    out = std::string("subject ") + buf;
  }
  return out;
}

}  // namespace

std::string describe_handshake_error(const boost::system::error_code& ec, const SSL* ssl) {
  long verify = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
  if (verify != X509_V_OK) {
    std::string out = "certificate verification failed: ";
    out += X509_verify_cert_error_string(verify);
    if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
      X509_VERIFY_PARAM* param = SSL_get0_param(const_cast<SSL*>(ssl));
      if (const char* wanted = X509_VERIFY_PARAM_get0_host(param, 0)) {
        out += "; wanted ";
        out += wanted;
      } else if (char* ip = X509_VERIFY_PARAM_get1_ip_asc(param)) {
        out += "; wanted ";
        out += ip;
        OPENSSL_free(ip);
      }
      auto* peer = static_cast<X509*>(SSL_get_ex_data(ssl, rejected_cert_index()));
      if (!peer) peer = SSL_get0_peer_certificate(ssl);
      if (peer) {
        out += "; the certificate names ";
        out += certificate_names(peer);
      }
    }
    return out;
  }
  if (ec == ssl::error::stream_truncated || ec == boost::asio::error::eof)
    return "the upstream closed the connection during the TLS handshake";
  return "TLS handshake failed: " + ec.message();
}

}  // namespace idemgate::tls
