// Keys and trace ids come from a per-thread pool of CSPRNG bytes: each byte
// handed out once, so no two keys repeat, on one thread or across them.
#include "proxy/ids.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace idemgate::proxy;

TEST_CASE("mint_uuid_v4: version 4 keys, none repeated across threads and pool refills") {
  std::vector<std::vector<std::string>> minted(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      // 2,000 keys of 16 bytes: 62 refills of a 512-byte pool, with trace
      // ids of other sizes between them so the draws straddle refills.
      for (int i = 0; i < 2000; ++i) {
        minted[t].push_back(mint_uuid_v4());
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
        CHECK(k[14] == '4');
        CHECK(std::string("89ab").find(k[19]) != std::string::npos);
      }
    }
  CHECK(seen.size() == total);
  CHECK(minted[0].back().size() == 1200);
  CHECK(minted[0].back() != std::string(1200, '0'));
}
