// Secret files: a new key is 0600 and kept across starts; a short or
// unreadable key is an error, never a silent new key.
#include "test_support.hpp"

#include "tls/secret_file.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <fstream>

using namespace idemgate::tls;
using idemgate::tls::test::TempDir;

TEST_CASE("load_or_create_key: created 0600 on first use, the same key after") {
  TempDir dir;
  const auto path = dir.path() / "sub" / "fingerprint.key";
  const auto first = load_or_create_key(path);
  REQUIRE(first.error.empty());
  CHECK(first.created);
  CHECK(first.bytes.size() == 32);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  const auto again = load_or_create_key(path);
  REQUIRE(again.error.empty());
  CHECK_FALSE(again.created);
  CHECK(again.bytes == first.bytes);
  CHECK(load_or_create_key(dir.path() / "other.key").bytes != first.bytes);
}

TEST_CASE("load_or_create_key: a key the operator wrote is used as is, a short one is refused") {
  TempDir dir;
  const auto hex = dir.path() / "hex.key";
  std::ofstream(hex) << std::string(64, 'a') << "\n";
  CHECK(load_or_create_key(hex).bytes == std::string(32, '\xaa'));
  const auto text = dir.path() / "text.key";
  std::ofstream(text) << "a passphrase that is long enough to be a key\n";
  CHECK(load_or_create_key(text).bytes == "a passphrase that is long enough to be a key");
  const auto short_key = dir.path() / "short.key";
  std::ofstream(short_key) << "short\n";
  const auto refused = load_or_create_key(short_key);
  CHECK(refused.bytes.empty());
  CHECK(refused.error.find("fewer than 32 bytes") != std::string::npos);
}
