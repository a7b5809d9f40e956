// Proxy authentication at request intake (config auth: { mode: required,
// users_file }): a Proxy-Authorization: Basic credential checked against the
// users file's salted PBKDF2 hashes. The hashing runs on one shared thread,
// never on a network thread; a credential verified once is remembered by the
// network thread that verified it (keyed by an HMAC under a per-process
// random key, and by the user's entry, so a changed or removed entry is
// checked again), so an agent's later requests cost one HMAC.
#pragma once

#include "config/config.hpp"
#include "proxy/problem.hpp"
#include "ledger/executor.hpp"

#include <boost/beast/http/fields.hpp>

#include <string_view>

namespace idemgate::proxy {

// Is `proxy_authorization` (the header's value, maybe empty) a valid
// credential of one of cfg.auth.users?
Task<bool> proxy_authenticated(const config::Config& cfg, std::string_view proxy_authorization);

// 407 proxy_auth_required, and the Proxy-Authenticate: Basic realm="idemgate"
// header that goes with it.
Problem proxy_auth_required(bool credential_given);
const boost::beast::http::fields& proxy_auth_challenge();

}  // namespace idemgate::proxy
