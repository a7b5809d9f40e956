// Keys and trace ids come from a per-thread pool of CSPRNG bytes: each byte
// handed out once, so no two keys repeat, on one thread or across them.
#include "proxy/ids.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace idemgate::proxy;

TEST_CASE("mint_uuid_v7: version 7 keys, none repeated across threads and pool refills") {
  std::vector<std::vector<std::string>> minted(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      // 2,000 keys of 10 random bytes: 39 refills of a 512-byte pool, with trace
      // ids of other sizes between them so the draws straddle refills.
      for (int i = 0; i < 2000; ++i) {
        minted[t].push_back(mint_uuid_v7());
        if (i % 7 == 0) minted[t].push_back(random_hex(13));
      }
      minted[t].push_back(random_hex(600));  // larger than the pool
    });
  for (auto& t : threads) t.join();
  std::set<std::string> seen;
  std::size_t total = 0;
  for (const auto& keys : minted)
    for (const auto& k : keys) {
      ++total;
      seen.insert(k);
      if (k.size() == 36) {
        CHECK(k[14] == '7');
        CHECK(std::string("89ab").find(k[19]) != std::string::npos);
      }
    }
  CHECK(seen.size() == total);
  CHECK(minted[0].back().size() == 1200);
  CHECK(minted[0].back() != std::string(1200, '0'));
}

// The first 48 bits are the minting millisecond: keys sort in the order they
// were minted (to the millisecond), and the time reads back.
TEST_CASE("mint_uuid_v7: keys carry their minting millisecond and sort by it") {
  auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  auto minted_ms = [](const std::string& key) {
    return std::stoll(key.substr(0, 8) + key.substr(9, 4), nullptr, 16);
  };
  auto const before = now_ms();
  std::vector<std::string> keys;
  // Long enough to cross a few milliseconds.
  while (keys.size() < 200000 && (keys.size() < 1000 || now_ms() < before + 3)) keys.push_back(mint_uuid_v7());
  auto const after = now_ms();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    CAPTURE(keys[i]);
    REQUIRE(keys[i].size() == 36);
    auto ms = minted_ms(keys[i]);
    CHECK(ms >= before);
    CHECK(ms <= after);
    if (i > 0) CHECK(ms >= minted_ms(keys[i - 1]));
  }
  CHECK(minted_ms(keys.back()) > minted_ms(keys.front()));
  // Within a millisecond the rest is random: not all the same.
  std::set<std::string> tails;
  for (const auto& k : keys) tails.insert(k.substr(14));
  CHECK(tails.size() == keys.size());
}
