// Keys and trace ids come from a per-thread pool of CSPRNG bytes: each byte
// handed out once, so no two keys repeat, on one thread or across them.
#include "proxy/ids.hpp"

#include <doctest/doctest.h>

#include <array>
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
      // 2,000 keys of 10 random bytes, with trace ids of other sizes between
      // them: dozens of refills of a 512-byte pool, the draws straddling them.
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

// The layout, from fixed values: the millisecond big-endian in the first 48
// bits, version 7, the RFC 9562 variant, the rest the random bytes.
TEST_CASE("format_uuid_v7: the millisecond first, then version, variant and the random bits") {
  std::array<unsigned char, 10> const ones{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  std::array<unsigned char, 10> const zeros{};
  std::array<unsigned char, 10> const counting{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23};
  CHECK(format_uuid_v7(0x0123456789abULL, counting) == "01234567-89ab-7123-8567-89abcdef0123");
  CHECK(format_uuid_v7(0, zeros) == "00000000-0000-7000-8000-000000000000");
  CHECK(format_uuid_v7(0xffffffffffffULL, ones) == "ffffffff-ffff-7fff-bfff-ffffffffffff");
  // Only 48 bits of time: higher bits are dropped, not carried.
  CHECK(format_uuid_v7(0x1000000000000ULL, zeros) == format_uuid_v7(0, zeros));
  // Later milliseconds sort later as text, whatever the random bits.
  auto const t = std::uint64_t{1796000000000};  // 2026
  CHECK(format_uuid_v7(t, ones) < format_uuid_v7(t + 1, zeros));
  CHECK(format_uuid_v7(t + 255, ones) < format_uuid_v7(t + 256, zeros));
  CHECK(format_uuid_v7(0xfffffffffeULL, ones) < format_uuid_v7(0xffffffffffULL, zeros));
}

// A minted key carries the clock's millisecond: read back, it lies between
// two readings of the clock taken around it (a step of the clock between
// them could make this fail; nothing here waits).
TEST_CASE("mint_uuid_v7: a minted key carries the minting millisecond") {
  auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  auto const before = now_ms();
  auto const key = mint_uuid_v7();
  auto const after = now_ms();
  auto const ms = std::stoll(key.substr(0, 8) + key.substr(9, 4), nullptr, 16);
  CHECK(ms >= before);
  CHECK(ms <= after);
}
