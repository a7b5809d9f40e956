// Leaf minting, the server TLS context around it, and the cache.
#include "tls/leaf_minter.hpp"

#include "tls/host_name.hpp"
#include "tls/x509_builder.hpp"

#include <boost/asio/prefer.hpp>
#include <boost/asio/execution/outstanding_work.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace idemgate::tls {

namespace {

// Refresh a cached leaf a day before it expires, so no handshake ever gets
// one that a client with a slightly fast clock already rejects.
constexpr std::chrono::hours refresh_margin{24};

bool add_subject_alt_name(X509* cert, const HostName& host) {
  GeneralNamesPtr names(sk_GENERAL_NAME_new_null());
  GENERAL_NAME* name = GENERAL_NAME_new();
  if (!names || !name) {
    GENERAL_NAME_free(name);
    return false;
  }
  sk_GENERAL_NAME_push(names.get(), name);  // owned by `names` from here
  if (host.is_ip) {
    ASN1_OCTET_STRING* ip = a2i_IPADDRESS(host.name.c_str());
    if (!ip) return false;
    GENERAL_NAME_set0_value(name, GEN_IPADD, ip);
  } else {
    ASN1_IA5STRING* dns = ASN1_IA5STRING_new();
    if (!dns) return false;
    GENERAL_NAME_set0_value(name, GEN_DNS, dns);
    if (ASN1_STRING_set(dns, host.name.data(), static_cast<int>(host.name.size())) != 1)
      return false;
  }
  return X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) == 1;
}

// The proxy speaks HTTP/1.1 to the agent; a client offering only h2 gets no
// ALPN answer and falls back to HTTP/1.1 by itself.
int select_http11(SSL*, const unsigned char** out, unsigned char* out_len,
                  const unsigned char* in, unsigned int in_len, void*) {
  static const unsigned char ours[] = "\x08http/1.1";
  unsigned char* selected = nullptr;
  unsigned char selected_len = 0;
  if (SSL_select_next_proto(&selected, &selected_len, ours, sizeof ours - 1, in, in_len) !=
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = selected;
  *out_len = selected_len;
  return SSL_TLSEXT_ERR_OK;
}

Result<X509Ptr> sign_leaf(const CertificateAuthority& ca, const HostName& host, EVP_PKEY* key) {
  using R = Result<X509Ptr>;
  auto cert = new_certificate(host.name, key, ca.cert.get(), leaf_lifetime);
  if (!cert.ok()) return cert;
  X509* x = cert.value.get();
  X509* issuer = ca.cert.get();
  bool ok = add_extension(x, issuer, NID_basic_constraints, "critical,CA:FALSE") &&
            add_extension(x, issuer, NID_key_usage, "critical,digitalSignature") &&
            add_extension(x, issuer, NID_ext_key_usage, "serverAuth") &&
            add_extension(x, issuer, NID_subject_key_identifier, "hash") &&
            add_extension(x, issuer, NID_authority_key_identifier, "keyid:always") &&
            add_subject_alt_name(x, host) && sign_certificate(x, ca.key.get());
  if (!ok) return R::failure(openssl_error("signing the leaf for " + host.name));
  return cert;
}

}  // namespace

MintResult mint_server_context(const CertificateAuthority& ca, std::string_view host_text) {
  using R = MintResult;
  auto host = parse_host(host_text);
  if (!host.ok()) return R::failure(host.error);
  auto key = generate_p256_key();
  if (!key.ok()) return R::failure(key.error);
  auto leaf = sign_leaf(ca, host.value, key.value.get());
  if (!leaf.ok()) return R::failure(leaf.error);

  try {
    namespace ssl = boost::asio::ssl;
    auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
    SSL_CTX* native = context->native_handle();
    SSL_CTX_set_options(native, SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    bool ok = SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) == 1 &&
              SSL_CTX_use_certificate(native, leaf.value.get()) == 1 &&
              SSL_CTX_use_PrivateKey(native, key.value.get()) == 1 &&
              SSL_CTX_add1_chain_cert(native, ca.cert.get()) == 1 &&
              SSL_CTX_check_private_key(native) == 1;
    if (!ok) return R::failure(openssl_error("building the TLS context for " + host.value.name));
    SSL_CTX_set_alpn_select_cb(native, select_http11, nullptr);
    return {std::move(context), {}};
  } catch (const std::exception& e) {
    ERR_clear_error();
    return R::failure("building the TLS context for " + host.value.name + ": " + e.what());
  }
}

LeafMinter::LeafMinter(CaPtr ca, std::size_t cache_capacity, std::size_t threads)
    : ca_(std::move(ca)), capacity_(cache_capacity), pool_(threads == 0 ? 1 : threads) {}

LeafMinter::~LeafMinter() {
  pool_.stop();
  pool_.join();
}

void LeafMinter::start(std::string host_text,
                       boost::asio::any_completion_handler<Signature> handler) {
  auto work = boost::asio::prefer(boost::asio::get_associated_executor(handler, pool_.get_executor()),
                                  boost::asio::execution::outstanding_work.tracked);
  Waiter waiter{std::move(handler), std::move(work)};
  auto host = parse_host(host_text);
  if (!host.ok()) {
    complete(std::move(waiter), MintResult::failure(host.error));
    return;
  }
  const std::string& key = host.value.name;

  std::unique_lock lock(mutex_);
  if (auto hit = lookup_locked(key)) {
    ++stats_.cache_hits;
    lock.unlock();
    complete(std::move(waiter), {std::move(hit), {}});
    return;
  }
  auto [it, first] = pending_.try_emplace(key);
  it->second.push_back(std::move(waiter));
  if (!first) {
    ++stats_.coalesced;
    return;
  }
  lock.unlock();
  boost::asio::post(pool_, [this, key] { run_mint(key); });
}

void LeafMinter::run_mint(const std::string& host) {
  MintResult result = mint_server_context(*ca_, host);
  std::vector<Waiter> waiters;
  {
    std::lock_guard lock(mutex_);
    if (result.ok()) {
      ++stats_.minted;
      insert_locked(host, result.value);
    } else {
      ++stats_.failed;
    }
    auto it = pending_.find(host);
    if (it != pending_.end()) {
      waiters = std::move(it->second);
      pending_.erase(it);
    }
  }
  for (auto& waiter : waiters) complete(std::move(waiter), result);
}

void LeafMinter::complete(Waiter waiter, MintResult result) {
  // Via the pool: post then dispatches the handler to its own executor,
  // tracking work there, so `waiter.work` may go once this returns.
  boost::asio::post(pool_.get_executor(),
                    boost::asio::append(std::move(waiter.handler), std::move(result)));
}

ServerContextPtr LeafMinter::cached(std::string_view host_text) {
  auto host = parse_host(host_text);
  if (!host.ok()) return nullptr;
  std::lock_guard lock(mutex_);
  auto hit = lookup_locked(host.value.name);
  if (hit) ++stats_.cache_hits;
  return hit;
}

LeafMinter::Stats LeafMinter::stats() const {
  std::lock_guard lock(mutex_);
  Stats out = stats_;
  out.cached = lru_.size();
  return out;
}

ServerContextPtr LeafMinter::lookup_locked(const std::string& host) {
  auto it = index_.find(host);
  if (it == index_.end()) return nullptr;
  if (std::chrono::system_clock::now() >= it->second->refresh_after) {
    lru_.erase(it->second);
    index_.erase(it);
    ++stats_.evicted;
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->context;
}

void LeafMinter::insert_locked(const std::string& host, ServerContextPtr context) {
  if (capacity_ == 0) return;
  auto refresh_after = std::chrono::system_clock::now() + leaf_lifetime - refresh_margin;
  if (auto it = index_.find(host); it != index_.end()) {
    it->second->context = std::move(context);
    it->second->refresh_after = refresh_after;
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.push_front(Entry{host, std::move(context), refresh_after});
  index_[host] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().host);
    lru_.pop_back();
    ++stats_.evicted;
  }
}

}  // namespace idemgate::tls
