// Identifiers and encodings (see ids.hpp).
#include "proxy/ids.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace idemgate::proxy {

namespace {
constexpr char kHex[] = "0123456789abcdef";

void draw(unsigned char* p, std::size_t n) {
  // RAND_bytes only fails when the CSPRNG cannot be seeded; a key from a weak
  // source would be worse than no request at all.
  if (RAND_bytes(p, static_cast<int>(n)) != 1) throw std::runtime_error("CSPRNG unavailable");
}

// Every guarded write mints a key and every request a trace id: each
// RAND_bytes call costs a DRBG round (locks, a cipher set-up) whatever the
// size, so a thread draws 512 bytes at a time and hands them out once each,
// wiping what it handed out. (idemgate never forks, which would copy the
// pool into the child.)
void fill_random(unsigned char* p, std::size_t n) {
  thread_local std::array<unsigned char, 512> pool;
  thread_local std::size_t left = 0;
  if (n > pool.size()) return draw(p, n);
  if (left < n) {
    draw(pool.data(), pool.size());
    left = pool.size();
  }
  unsigned char* from = pool.data() + (pool.size() - left);
  std::memcpy(p, from, n);
  OPENSSL_cleanse(from, n);
  left -= n;
}
}  // namespace

std::string format_uuid_v7(std::uint64_t unix_ms, std::span<const unsigned char, 10> random) {
  std::array<unsigned char, 16> b;
  // The first 48 bits: Unix time in milliseconds, big-endian (RFC 9562).
  for (int i = 0; i < 6; ++i) b[i] = static_cast<unsigned char>(unix_ms >> (40 - 8 * i));
  std::memcpy(b.data() + 6, random.data(), random.size());
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x70);  // version 7
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // RFC 9562 variant
  std::string out;
  out.reserve(36);
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[b[i] >> 4];
    out += kHex[b[i] & 0x0f];
  }
  return out;
}

std::string mint_uuid_v7() {
  std::array<unsigned char, 10> random;
  fill_random(random.data(), random.size());
  auto const ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  auto key = format_uuid_v7(static_cast<std::uint64_t>(ms), random);
  OPENSSL_cleanse(random.data(), random.size());
  return key;
}

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> b(bytes);
  fill_random(b.data(), b.size());
  std::string out;
  for (auto c : b) {
    out += kHex[c >> 4];
    out += kHex[c & 0x0f];
  }
  return out;
}

std::string decode_base64(std::string_view text) {
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  if (text.empty() || text.size() % 4 != 0 || text.size() > 4096) return {};
  std::string out(text.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return {};
  std::size_t pad = 0;
  if (text.back() == '=') ++pad;
  if (text.size() > 1 && text[text.size() - 2] == '=') ++pad;
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

}  // namespace idemgate::proxy
