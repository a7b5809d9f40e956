// Who may use the admin listener: the bearer token from admin.token_file,
// compared in constant time, a session cookie derived from it for the
// operator page, and the CSRF token its forms carry. Without a token the
// listener is loopback-only (checked at start) and a request must name a
// loopback Host, so a web page elsewhere cannot reach it by DNS rebinding.
#pragma once

#include "config/config.hpp"
#include "policy/hmac.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace idemgate::proxy {

using policy::hmac_sha256_hex;
// Constant time in the contents (both sides are hashed first, so the
// lengths leak nothing either).
bool constant_time_equal(std::string_view a, std::string_view b);

class AdminAuth {
 public:
  // Reads admin.token_file (its first line). error: why the listener must not
  // start (unreadable or empty token file, non-loopback without a token).
  static AdminAuth load(const config::Admin& admin, std::string& error);

  bool has_token() const noexcept { return !token_.empty(); }
  // The Authorization header value carries the token.
  bool bearer_ok(std::string_view authorization) const;
  // The Cookie header carries the session the login form set.
  bool cookie_ok(std::string_view cookie_header) const;
  bool token_ok(std::string_view token) const;
  // Set-Cookie value after a good login (HttpOnly, SameSite=Strict).
  std::string session_cookie() const;
  // The hidden field every state-changing form of the page carries.
  const std::string& csrf_token() const noexcept { return csrf_; }
  bool csrf_ok(std::string_view value) const { return constant_time_equal(value, csrf_); }

 private:
  std::string token_;
  std::string session_;  // cookie value: HMAC(token, ...) so the token itself is never in a cookie
  std::string csrf_;
};

inline constexpr std::string_view admin_cookie_name = "idemgate_admin";

// Is the Host header a loopback name (127.0.0.1, [::1], localhost, any port)?
bool loopback_host(std::string_view host_header);

}  // namespace idemgate::proxy
