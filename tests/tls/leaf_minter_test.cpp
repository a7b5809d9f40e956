// Minted leaves read back with OpenSSL (chain, SANs, usages, validity), the
// bounded cache, and minting off the caller's thread, once per host.
#include "test_support.hpp"

#include "tls/leaf_minter.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <openssl/ssl.h>

#include <latch>
#include <thread>
#include <vector>

using namespace idemgate::tls;
using idemgate::tls::test::TempDir;
using idemgate::tls::test::TestCa;
namespace asio = boost::asio;

namespace {

X509* leaf_of(const ServerContextPtr& context) {
  return SSL_CTX_get0_certificate(context->native_handle());
}

ServerContextPtr mint(const CertificateAuthority& ca, std::string_view host) {
  auto minted = mint_server_context(ca, host);
  REQUIRE_MESSAGE(minted.ok(), minted.error);
  return minted.value;
}

// X509_verify_cert of `leaf` against `ca` alone, for a TLS server.
int verify_chain(X509* leaf, X509* ca) {
  X509StorePtr store(X509_STORE_new());
  X509_STORE_add_cert(store.get(), ca);
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf, nullptr);
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_SERVER);
  int ok = X509_verify_cert(ctx.get());
  return ok == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx.get());
}

// Runs the minter's completions on `ioc` until all are done.
MintResult mint_on(LeafMinter& minter, asio::io_context& ioc, std::string_view host) {
  MintResult out;
  bool done = false;
  minter.mint_async(host, ioc.get_executor(), [&](MintResult r) {
    out = std::move(r);
    done = true;
  });
  CHECK_FALSE(done);  // never completes inline, hit or miss
  ioc.restart();
  ioc.run();
  REQUIRE(done);
  return out;
}

}  // namespace

TEST_CASE("a leaf for a DNS name chains to the CA and names only that host") {
  TestCa ca;
  auto context = mint(*ca.ca, "API.Example.com.");
  X509* leaf = leaf_of(context);
  REQUIRE(leaf);

  CHECK(verify_chain(leaf, ca.ca->cert.get()) == X509_V_OK);
  CHECK(X509_check_host(leaf, "api.example.com", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(leaf, "other.example.com", 0, 0, nullptr) == 0);
  CHECK(X509_check_host(leaf, "example.com", 0, 0, nullptr) == 0);
  // The name is in the SAN, not only the CN (which modern clients ignore).
  CHECK(X509_check_host(leaf, "api.example.com", 0, X509_CHECK_FLAG_NEVER_CHECK_SUBJECT,
                        nullptr) == 1);

  CHECK(X509_check_ca(leaf) == 0);
  CHECK((X509_get_key_usage(leaf) & KU_DIGITAL_SIGNATURE) != 0);
  CHECK((X509_get_key_usage(leaf) & KU_KEY_CERT_SIGN) == 0);
  CHECK((X509_get_extended_key_usage(leaf) & XKU_SSL_SERVER) != 0);
  REQUIRE(X509_get0_authority_key_id(leaf));
  CHECK(ASN1_OCTET_STRING_cmp(X509_get0_authority_key_id(leaf),
                              X509_get0_subject_key_id(ca.ca->cert.get())) == 0);

  int days = 0, seconds = 0;
  REQUIRE(ASN1_TIME_diff(&days, &seconds, X509_get0_notBefore(leaf), X509_get0_notAfter(leaf)));
  CHECK(days == 30);
  CHECK(seconds == 3600);  // backdated one hour
  CHECK(X509_cmp_current_time(X509_get0_notBefore(leaf)) < 0);

  char group[64] = {};
  REQUIRE(EVP_PKEY_get_group_name(X509_get0_pubkey(leaf), group, sizeof group, nullptr) == 1);
  CHECK(std::string(group) == "prime256v1");
}

TEST_CASE("a leaf for an IP literal carries an IP SAN") {
  TestCa ca;
  auto v4_context = mint(*ca.ca, "10.1.2.3");
  X509* v4 = leaf_of(v4_context);
  CHECK(verify_chain(v4, ca.ca->cert.get()) == X509_V_OK);
  CHECK(X509_check_ip_asc(v4, "10.1.2.3", 0) == 1);
  CHECK(X509_check_ip_asc(v4, "10.1.2.4", 0) == 0);
  CHECK(X509_check_host(v4, "10.1.2.3", 0, X509_CHECK_FLAG_NEVER_CHECK_SUBJECT, nullptr) == 0);

  auto v6_context = mint(*ca.ca, "[::1]");
  X509* v6 = leaf_of(v6_context);
  CHECK(X509_check_ip_asc(v6, "::1", 0) == 1);
  CHECK(X509_check_ip_asc(v6, "0:0::1", 0) == 1);
}

TEST_CASE("a leaf does not verify against another CA, and serials differ") {
  TestCa ca, other;
  auto a = mint(*ca.ca, "api.example.com");
  auto b = mint(*ca.ca, "api.example.com");
  CHECK(verify_chain(leaf_of(a), other.ca->cert.get()) != X509_V_OK);
  CHECK(ASN1_INTEGER_cmp(X509_get0_serialNumber(leaf_of(a)), X509_get0_serialNumber(leaf_of(b))) != 0);
}

TEST_CASE("names that cannot be in a certificate are refused") {
  TestCa ca;
  for (const char* bad : {"", "*.example.com", "a b.com", "a..b", "fe80::1%eth0", "x/y"}) {
    CAPTURE(bad);
    auto minted = mint_server_context(*ca.ca, bad);
    CHECK_FALSE(minted.ok());
    CHECK_FALSE(minted.error.empty());
  }
  // A name longer than a CN may be still gets a leaf (SAN only).
  std::string long_name(60, 'a');
  long_name += ".example.com";
  auto context = mint(*ca.ca, long_name);
  X509* leaf = leaf_of(context);
  CHECK(X509_check_host(leaf, long_name.c_str(), 0, 0, nullptr) == 1);
}

TEST_CASE("the cache returns the same context for the same host") {
  TestCa ca;
  LeafMinter minter(ca.ca, 8);
  asio::io_context ioc;
  auto first = mint_on(minter, ioc, "api.example.com");
  auto again = mint_on(minter, ioc, "API.EXAMPLE.COM");
  REQUIRE(first.ok());
  REQUIRE(again.ok());
  CHECK(first.value == again.value);
  CHECK(minter.cached("api.example.com") == first.value);
  auto stats = minter.stats();
  CHECK(stats.minted == 1);
  CHECK(stats.cache_hits == 2);
}

TEST_CASE("the cache is bounded and evicts the least recently used host") {
  TestCa ca;
  LeafMinter minter(ca.ca, 2);
  asio::io_context ioc;
  auto a = mint_on(minter, ioc, "a.test").value;
  mint_on(minter, ioc, "b.test");
  CHECK(minter.cached("a.test") == a);  // a is now the most recent
  mint_on(minter, ioc, "c.test");

  auto stats = minter.stats();
  CHECK(stats.cached == 2);
  CHECK(stats.evicted == 1);
  CHECK(minter.cached("b.test") == nullptr);
  CHECK(minter.cached("a.test") == a);
  CHECK(minter.cached("c.test") != nullptr);
}

TEST_CASE("a zero-sized cache mints every time") {
  TestCa ca;
  LeafMinter minter(ca.ca, 0);
  asio::io_context ioc;
  auto a = mint_on(minter, ioc, "a.test");
  auto b = mint_on(minter, ioc, "a.test");
  CHECK(a.value != b.value);
  CHECK(minter.stats().minted == 2);
  CHECK(minter.stats().cached == 0);
}

TEST_CASE("concurrent requests for one host mint once and complete on the caller's executor") {
  TestCa ca;
  LeafMinter minter(ca.ca, 16, 2);
  asio::io_context ioc;
  constexpr int callers = 4;
  constexpr int per_caller = 8;
  std::vector<ServerContextPtr> results;
  std::vector<std::thread::id> ran_on;

  // Requests start from several threads at once; completions must all
  // arrive on ioc's thread (this one).
  std::latch go(callers);
  std::vector<std::thread> threads;
  for (int t = 0; t < callers; ++t) {
    threads.emplace_back([&] {
      go.arrive_and_wait();
      for (int i = 0; i < per_caller; ++i) {
        minter.mint_async("same.example.com", ioc.get_executor(), [&](MintResult r) {
          CHECK(r.ok());
          results.push_back(r.value);
          ran_on.push_back(std::this_thread::get_id());
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  ioc.run();

  REQUIRE(results.size() == callers * per_caller);
  for (const auto& r : results) CHECK(r == results.front());
  for (const auto& id : ran_on) CHECK(id == std::this_thread::get_id());
  auto stats = minter.stats();
  CHECK(stats.minted == 1);
  CHECK(stats.coalesced + stats.cache_hits == callers * per_caller - 1);
}

TEST_CASE("async_mint works as an awaitable and reports bad hosts as a result") {
  TestCa ca;
  LeafMinter minter(ca.ca, 4);
  asio::io_context ioc;
  MintResult good, bad;
  std::thread::id resumed_on;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        good = co_await minter.async_mint("await.example.com", asio::use_awaitable);
        resumed_on = std::this_thread::get_id();
        auto hit = co_await minter.async_mint("AWAIT.example.com", asio::use_awaitable);
        CHECK(hit.value == good.value);
        CHECK(std::this_thread::get_id() == resumed_on);
        bad = co_await minter.async_mint("not a host", asio::use_awaitable);
      },
      [](std::exception_ptr e) { REQUIRE_FALSE(e); });
  ioc.run();
  CHECK(good.ok());
  CHECK(good.value != nullptr);
  CHECK(resumed_on == std::this_thread::get_id());
  CHECK_FALSE(bad.ok());
  CHECK(bad.error.find("not a host") != std::string::npos);
}
