// Basic credentials and the users file's PBKDF2 entries.
#include "policy/proxy_auth.hpp"

#include <doctest/doctest.h>

using namespace idemgate::policy;

TEST_CASE("parse_basic: user and password out of a Proxy-Authorization value") {
  auto c = parse_basic("Basic YWxpY2U6Y29ycmVjdCBob3JzZQ==");  // alice:correct horse
  REQUIRE(c);
  CHECK(c->user == "alice");
  CHECK(c->password == "correct horse");
  c = parse_basic("basic   Ym9iOmE6Yjpj ");  // bob:a:b:c, the password keeps its colons
  REQUIRE(c);
  CHECK(c->user == "bob");
  CHECK(c->password == "a:b:c");
  CHECK_FALSE(parse_basic(""));
  CHECK_FALSE(parse_basic("Bearer abc"));
  CHECK_FALSE(parse_basic("Basic !!!"));
  CHECK_FALSE(parse_basic("Basic bm9jb2xvbg=="));  // "nocolon"
  CHECK_FALSE(parse_basic("Basicx YTpi"));
}

TEST_CASE("users file lines: made, parsed, verified in constant time") {
  const auto line = make_user_line("alice", "correct horse", "0123456789abcdef", 1000);
  REQUIRE(line.starts_with("alice:pbkdf2-sha256$1000$"));
  CHECK(line.find("correct horse") == std::string::npos);
  auto parsed = parse_user_line(line);
  REQUIRE(std::holds_alternative<UserEntry>(parsed));
  const auto& entry = std::get<UserEntry>(parsed);
  CHECK(entry.name == "alice");
  CHECK(entry.iterations == 1000);
  CHECK(verify_password(entry, "correct horse"));
  CHECK_FALSE(verify_password(entry, "correct horsE"));
  CHECK_FALSE(verify_password(entry, ""));
  // Another salt, another hash for the same password.
  CHECK(make_user_line("alice", "correct horse", "fedcba9876543210", 1000) != line);

  for (const char* bad : {"alice", "alice:plain", "alice:pbkdf2-sha256$10$00ff00ff00ff00ff$00",
                          "alice:pbkdf2-sha256$1000$zz$00", "a b:pbkdf2-sha256$1000$00ff00ff00ff00ff$00",
                          ":pbkdf2-sha256$1000$00ff00ff00ff00ff$00",
                          "alice:pbkdf2-sha256$1000$00ff00ff00ff00ff$00ff"}) {
    CAPTURE(bad);
    CHECK(std::holds_alternative<std::string>(parse_user_line(bad)));
  }
  CHECK(user_name_error("run-42") == std::nullopt);
  CHECK(user_name_error("a:b"));
  CHECK(user_name_error(""));
  CHECK(user_name_error("a\tb"));
}
