// TLS toward upstreams: one verifying client context for the process, the
// per-connection SNI and host name check, and the reason a failed handshake
// is reported with (502 upstream_tls_failed). Never a silent fallback to an
// unverified connection.
#pragma once

#include "tls/openssl_ptr.hpp"

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <string_view>

namespace idemgate::tls {

using ClientContextPtr = std::shared_ptr<boost::asio::ssl::context>;

// The system trust store plus `upstream_ca_file` (config tls.upstream_ca_file;
// empty: none), TLS 1.2 or newer, peer verification on, ALPN http/1.1.
// Built once at start-up (it reads files); the error names the bad file.
Result<ClientContextPtr> make_client_context(const std::string& upstream_ca_file);

// Sets SNI (not for IP literals, RFC 6066) and the name the certificate must
// carry (DNS SAN, or IP SAN for a literal) on one connection. Call before
// async_handshake; a certificate for another name then fails the handshake.
// Installs the connection's verify callback (it keeps the rejected leaf for
// describe_handshake_error): do not call set_verify_callback afterwards.
boost::system::error_code prepare_client_ssl(SSL* ssl, std::string_view host);

// For boost::asio::ssl::stream<...> and beast::ssl_stream<...>.
template <class SslStream>
boost::system::error_code prepare_client_stream(SslStream& stream, std::string_view host) {
  return prepare_client_ssl(stream.native_handle(), host);
}

// A sentence for the problem detail of a failed client handshake: the
// certificate verification result when that is what failed ("certificate
// verification failed: hostname mismatch; wanted wrong.test, the certificate
// names DNS:localhost"), else the TLS or socket error.
std::string describe_handshake_error(const boost::system::error_code& ec, const SSL* ssl);

template <class SslStream>
std::string describe_handshake_error(const boost::system::error_code& ec, SslStream& stream) {
  return describe_handshake_error(ec, static_cast<const SSL*>(stream.native_handle()));
}

}  // namespace idemgate::tls
