// policy::hmac_sha256_hex keeps one keyed context per thread: the answers
// must be the RFC's whatever the order of keys and threads.
#include "policy/hmac.hpp"

#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

using idemgate::policy::hmac_sha256_hex;

namespace {
// RFC 4231 test cases 1 and 2.
const std::string key1(20, '\x0b');
constexpr const char* data1 = "Hi There";
constexpr const char* mac1 = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7";
constexpr const char* mac2 = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
}  // namespace

TEST_CASE("hmac_sha256_hex: RFC 4231 vectors, repeated and with the keys alternating") {
  for (int i = 0; i < 3; ++i) {
    CHECK(hmac_sha256_hex(key1, data1) == mac1);
    CHECK(hmac_sha256_hex(key1, data1) == mac1);  // the same key again: the kept context
    CHECK(hmac_sha256_hex("Jefe", "what do ya want for nothing?") == mac2);
  }
  // An empty key and empty data are valid HMAC inputs (RFC 2104: the key is
  // zero-padded), and differ from each other's neighbours.
  auto const empty = hmac_sha256_hex("", "");
  CHECK(empty == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
  CHECK(hmac_sha256_hex("", "x") != empty);
  CHECK(hmac_sha256_hex("Jefe", "") != empty);
  // A key that is a prefix of the kept one is another key.
  CHECK(hmac_sha256_hex("Jef", "what do ya want for nothing?") != mac2);
  CHECK(hmac_sha256_hex("Jefe", "what do ya want for nothing?") == mac2);
}

TEST_CASE("hmac_sha256_hex: threads each keep their own context") {
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        bool const first = (i + t) % 2 == 0;
        auto const mac = first ? hmac_sha256_hex(key1, data1) : hmac_sha256_hex("Jefe", "what do ya want for nothing?");
        if (mac != (first ? mac1 : mac2)) ++wrong[t];
      }
    });
  for (auto& t : threads) t.join();
  CHECK(wrong == std::vector<int>(4, 0));
}
