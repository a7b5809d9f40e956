// Proxy authentication (see proxy_auth.hpp).
#include "proxy/proxy_auth.hpp"

#include "policy/proxy_auth.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <string>
#include <unordered_map>

namespace idemgate::proxy {

namespace asio = boost::asio;

namespace {

// One thread: PBKDF2 is deliberately slow, and a flood of wrong passwords
// must cost at most one core, never the network threads.
asio::thread_pool& hashing_pool() {
  static asio::thread_pool pool(1);
  return pool;
}

const std::string& process_key() {
  static const std::string key = [] {
    std::string k(32, '\0');
    if (RAND_bytes(reinterpret_cast<unsigned char*>(k.data()), static_cast<int>(k.size())) != 1) k.clear();
    return k;
  }();
  return key;
}

std::string digest(std::string_view credential) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  const auto& key = process_key();
  if (key.empty() || !HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                           reinterpret_cast<const unsigned char*>(credential.data()), credential.size(), out, &length))
    return {};
  return std::string(reinterpret_cast<const char*>(out), length);
}

// Verified credentials of this network thread: digest -> the entry's line.
constexpr std::size_t remembered_limit = 4096;
thread_local std::unordered_map<std::string, std::string> remembered;

// A user that does not exist costs one PBKDF2 of the same work too, so the
// time of a 407 does not tell which user names exist.
policy::UserEntry decoy(const config::Config& cfg) {
  policy::UserEntry entry;
  entry.iterations = cfg.auth.users.empty() ? policy::default_pbkdf2_iterations : cfg.auth.users.front().iterations;
  entry.salt = "idemgate-decoy-salt";
  entry.hash = std::string(32, '\0');
  return entry;
}

}  // namespace

Task<bool> proxy_authenticated(const config::Config& cfg, std::string_view proxy_authorization) {
  auto credentials = policy::parse_basic(proxy_authorization);
  if (!credentials) co_return false;
  const auto* entry = policy::find_user(cfg.auth.users, credentials->user);
  const auto key = digest(proxy_authorization);
  if (entry && !key.empty()) {
    if (auto it = remembered.find(key); it != remembered.end() && it->second == entry->line) co_return true;
  }
  const policy::UserEntry checked = entry ? *entry : decoy(cfg);
  std::string password = std::move(credentials->password);
  // On the pool's own executor (any_io_executor: a rare, slow path); the
  // network thread's coroutine awaits its result.
  bool const ok = co_await asio::co_spawn(
      hashing_pool(),
      [&checked, &password]() -> asio::awaitable<bool> { co_return policy::verify_password(checked, password); },
      use_task);
  if (!ok || !entry) co_return false;
  if (!key.empty()) {
    if (remembered.size() >= remembered_limit) remembered.clear();
    remembered[key] = entry->line;
  }
  co_return true;
}

Problem proxy_auth_required(bool credential_given) {
  return {407, "proxy_auth_required", "Proxy authentication required",
          credential_given ? "the Proxy-Authorization credential is not valid for any user of auth.users_file"
                           : "this proxy needs Proxy-Authorization: Basic (user:password in the proxy URL, as in "
                             "HTTP_PROXY=http://user:password@host:port)",
          std::nullopt, {}};
}

const boost::beast::http::fields& proxy_auth_challenge() {
  static const boost::beast::http::fields fields = [] {
    boost::beast::http::fields f;
    f.set(boost::beast::http::field::proxy_authenticate, "Basic realm=\"idemgate\"");
    return f;
  }();
  return fields;
}

}  // namespace idemgate::proxy
