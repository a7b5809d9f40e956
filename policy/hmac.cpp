// HMAC-SHA256 (see hmac.hpp). OpenSSL 3's one-shot HMAC() fetches the
// algorithm and keys a new context on every call: on the write path that
// was most of a fingerprint's cost.
#include "policy/hmac.hpp"

#include <openssl/core_names.h>
#include <openssl/evp.h>

#include <atomic>
#include <memory>

namespace idemgate::policy {
namespace {

struct FreeMac {
  void operator()(EVP_MAC* mac) const noexcept { EVP_MAC_free(mac); }
};
struct FreeContext {
  void operator()(EVP_MAC_CTX* context) const noexcept { EVP_MAC_CTX_free(context); }
};

// Fetched once it succeeds (a failed fetch is tried again next time, not
// kept); freed at exit.
EVP_MAC* hmac() {
  static std::atomic<EVP_MAC*> kept{nullptr};
  if (auto* mac = kept.load(std::memory_order_acquire)) return mac;
  std::unique_ptr<EVP_MAC, FreeMac> fetched(EVP_MAC_fetch(nullptr, "HMAC", nullptr));
  if (!fetched) return nullptr;
  EVP_MAC* expected = nullptr;
  if (kept.compare_exchange_strong(expected, fetched.get(), std::memory_order_acq_rel)) {
    static const std::unique_ptr<EVP_MAC, FreeMac> owner(fetched.release());
    return owner.get();
  }
  return expected;  // another thread's fetch won; ours is freed
}

// The context keyed last on this thread.
struct Keyed {
  std::string key;
  std::unique_ptr<EVP_MAC_CTX, FreeContext> context;

  // Ready for a new message under `k`: EVP_MAC_init without a key starts
  // one under the key set before.
  bool start(std::string_view k) {
    if (context && key == k) return EVP_MAC_init(context.get(), nullptr, 0, nullptr) == 1;
    key.clear();
    context.reset(hmac() ? EVP_MAC_CTX_new(hmac()) : nullptr);
    if (!context) return false;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    static constexpr unsigned char no_key = 0;  // a key of length 0 still needs an address
    const auto* bytes = k.empty() ? &no_key : reinterpret_cast<const unsigned char*>(k.data());
    if (EVP_MAC_init(context.get(), bytes, k.size(), params) != 1) {
      context.reset();
      return false;
    }
    key.assign(k);
    return true;
  }
};

}  // namespace

std::string hmac_sha256_hex(std::string_view key, std::string_view data) {
  thread_local Keyed keyed;
  unsigned char digest[EVP_MAX_MD_SIZE];
  std::size_t length = 0;
  if (!keyed.start(key) ||
      EVP_MAC_update(keyed.context.get(), reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1 ||
      EVP_MAC_final(keyed.context.get(), digest, &length, sizeof digest) != 1) {
    keyed.context.reset();  // keyed afresh next time
    return {};
  }
  static constexpr char hex_digits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(length * 2);
  for (std::size_t i = 0; i < length; ++i) {
    hex += hex_digits[digest[i] >> 4];
    hex += hex_digits[digest[i] & 0xf];
  }
  return hex;
}

}  // namespace idemgate::policy
