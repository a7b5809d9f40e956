// Admin listener authentication (see admin_auth.hpp).
#include "proxy/admin_auth.hpp"

#include "proxy/ids.hpp"

#include <boost/asio/ip/address.hpp>

#include <openssl/crypto.h>

#include <fstream>

namespace idemgate::proxy {

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Hashing under a fixed key makes both sides 64 bytes long.
  auto const x = hmac_sha256_hex("idemgate compare", a);
  auto const y = hmac_sha256_hex("idemgate compare", b);
  // A failed HMAC is empty: never equal (comparing no bytes would be).
  return x.size() == 64 && y.size() == 64 && CRYPTO_memcmp(x.data(), y.data(), x.size()) == 0;
}

AdminAuth AdminAuth::load(const config::Admin& admin, std::string& error) {
  AdminAuth auth;
  if (!admin.token_file.empty()) {
    std::ifstream in(admin.token_file);
    if (!in) {
      error = "cannot read admin.token_file " + admin.token_file;
      return auth;
    }
    std::getline(in, auth.token_);
    while (!auth.token_.empty() && (auth.token_.back() == '\r' || auth.token_.back() == ' ')) auth.token_.pop_back();
    if (auth.token_.empty()) {
      error = "admin.token_file " + admin.token_file + " is empty: its first line is the bearer token";
      return auth;
    }
  } else {
    boost::system::error_code ec;
    auto const address = boost::asio::ip::make_address(admin.listen.host, ec);
    if (ec || !address.is_loopback()) {
      error = "admin.listen " + admin.listen.host + " is not a loopback address: set admin.token_file "
              "(a file whose first line is the bearer token) to serve the admin API there";
      return auth;
    }
  }
  // Without a token the CSRF key is random per process: a page the
  // operator did not load from this listener cannot know it.
  std::string const key = auth.token_.empty() ? random_hex(32) : auth.token_;
  auth.session_ = hmac_sha256_hex(key, "idemgate admin session");
  auth.csrf_ = hmac_sha256_hex(key, "idemgate admin csrf");
  return auth;
}

bool AdminAuth::token_ok(std::string_view token) const { return has_token() && constant_time_equal(token, token_); }

bool AdminAuth::bearer_ok(std::string_view authorization) const {
  constexpr std::string_view scheme = "Bearer ";
  if (authorization.size() <= scheme.size()) return false;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) !=
        std::tolower(static_cast<unsigned char>(scheme[i])))
      return false;
  return token_ok(authorization.substr(scheme.size()));
}

bool AdminAuth::cookie_ok(std::string_view header) const {
  if (!has_token()) return false;
  while (!header.empty()) {
    auto const semi = header.find(';');
    auto part = header.substr(0, semi);
    header = semi == std::string_view::npos ? std::string_view{} : header.substr(semi + 1);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    auto const eq = part.find('=');
    if (eq != std::string_view::npos && part.substr(0, eq) == admin_cookie_name &&
        constant_time_equal(part.substr(eq + 1), session_))
      return true;
  }
  return false;
}

std::string AdminAuth::session_cookie() const {
  return std::string(admin_cookie_name) + "=" + session_ + "; Path=/; HttpOnly; SameSite=Strict";
}

bool loopback_host(std::string_view host) {
  if (host.starts_with("[")) {
    auto const close = host.find(']');
    if (close == std::string_view::npos) return false;
    host = host.substr(1, close - 1);
  } else if (auto const colon = host.rfind(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (host == "localhost") return true;
  boost::system::error_code ec;
  auto const address = boost::asio::ip::make_address(std::string(host), ec);
  return !ec && address.is_loopback();
}

}  // namespace idemgate::proxy
