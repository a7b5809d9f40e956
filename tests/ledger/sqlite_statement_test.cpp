// sqlite::Connection's prepared statements: a Statement made on it takes the
// one prepared for its text the last time, reset and with its bindings
// cleared, and gives it back when done (sqlite_statement.hpp).
#include "ledger/sqlite_statement.hpp"

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace idemgate::ledger::sqlite {
namespace {

// A database file in a folder of its own, removed at the end.
struct TempDb {
  std::filesystem::path dir;
  TempDb() {
    std::string pattern = (std::filesystem::temp_directory_path() / "idemgate-stmt-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    dir = pattern;
  }
  ~TempDb() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  sqlite3* open() const {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open((dir / "t.db").string().c_str(), &db) == SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
  }
};

std::string one_text(Connection& c, std::string_view sql) {
  Statement s(c, sql);
  REQUIRE(s.step());
  return s.is_null(0) ? "NULL" : s.text(0);
}

}  // namespace

TEST_CASE("unit: a connection's statement is prepared once and taken again, its bindings cleared") {
  TempDb t;
  Connection c(t.open());
  exec(c, "CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)");
  char const* insert = "INSERT INTO kv (k, v) VALUES (?, ?)";
  sqlite3_stmt* first = nullptr;
  {
    Statement s(c, insert);
    s.bind(1, std::string_view("a")).bind(2, std::string_view("1"));
    CHECK(s.run() == 1);
    first = sqlite3_next_stmt(c, nullptr);
  }
  CHECK(c.idle() == 1);
  {
    Statement s(c, insert);
    CHECK(sqlite3_next_stmt(c, nullptr) == first);  // the same statement, not a new one
    CHECK(c.idle() == 0);                           // taken out while in use
    // No binding of 2: it is NULL again, not the last user's "1".
    s.bind(1, std::string_view("b"));
    CHECK(s.run() == 1);
  }
  CHECK(c.idle() == 1);  // given back again, not finalized after its reuse
  {
    Statement s(c, insert);
    CHECK(sqlite3_next_stmt(c, nullptr) == first);
    s.bind(1, std::string_view("c")).bind(2, std::string_view("3"));
    CHECK(s.run() == 1);
  }
  CHECK(one_text(c, "SELECT v FROM kv WHERE k = 'b'") == "NULL");
  CHECK(one_text(c, "SELECT v FROM kv WHERE k = 'a'") == "1");
}

TEST_CASE("unit: two statements of one text at once are two, and one of them is kept") {
  TempDb t;
  Connection c(t.open());
  exec(c, "CREATE TABLE n (i INTEGER)");
  exec(c, "INSERT INTO n VALUES (1), (2), (3)");
  char const* all = "SELECT i FROM n ORDER BY i";
  {
    Statement outer(c, all);
    REQUIRE(outer.step());
    CHECK(outer.int64(0) == 1);
    {
      Statement inner(c, all);  // the text is in use: prepared again
      int rows = 0;
      while (inner.step()) ++rows;
      CHECK(rows == 3);
    }
    CHECK(c.idle() == 1);
    REQUIRE(outer.step());  // the outer one went on where it was
    CHECK(outer.int64(0) == 2);
  }
  CHECK(c.idle() == 1);
  int open = 0;
  for (auto* s = sqlite3_next_stmt(c, nullptr); s; s = sqlite3_next_stmt(c, s)) ++open;
  CHECK(open == 1);  // the second was finalized, not leaked
}

TEST_CASE("unit: a statement given back mid-read holds no lock, and one that failed is used again") {
  TempDb t;
  Connection c(t.open());
  exec(c, "PRAGMA journal_mode=WAL");
  exec(c, "CREATE TABLE u (k TEXT PRIMARY KEY)");
  exec(c, "INSERT INTO u VALUES ('x'), ('y')");
  {
    Statement s(c, "SELECT k FROM u");
    REQUIRE(s.step());  // one row of two read, then given back
  }
  // Reset ended its read: a checkpoint of the whole WAL (which waits for no
  // reader to hold an old snapshot) completes, and another connection writes.
  sqlite3* other = t.open();
  int log = -1, done = -1;
  CHECK(sqlite3_wal_checkpoint_v2(other, nullptr, SQLITE_CHECKPOINT_TRUNCATE, &log, &done) == SQLITE_OK);
  exec(other, "INSERT INTO u VALUES ('z')");
  sqlite3_close(other);

  char const* insert = "INSERT INTO u (k) VALUES (?)";
  {
    Statement s(c, insert);
    s.bind(1, std::string_view("x"));
    CHECK_THROWS_AS(s.run(), SqliteError);  // the key is taken
  }
  {
    Statement s(c, insert);
    s.bind(1, std::string_view("w"));
    CHECK(s.run() == 1);
  }
  CHECK(one_text(c, "SELECT count(*) FROM u") == "4");
}

TEST_CASE("unit: long texts that differ only in their middle are kept apart") {
  TempDb t;
  Connection c(t.open());
  // Same length, same first and last 32 bytes: the same hash, told apart by
  // the whole text.
  std::string const head = "SELECT 'padding padding padding padding', ";
  std::string const tail = " AS v FROM (SELECT 1) WHERE 1 = 1 AND 2 = 2 AND 3 = 3";
  std::string const one = head + "'first!'" + tail;
  std::string const two = head + "'second'" + tail;
  REQUIRE(one.size() == two.size());
  REQUIRE(one.size() > 64);
  for (int round = 0; round < 2; ++round) {
    Statement a(c, one);
    REQUIRE(a.step());
    CHECK(a.text(1) == "first!");
    Statement b(c, two);
    REQUIRE(b.step());
    CHECK(b.text(1) == "second");
  }
  CHECK(c.idle() == 2);
}

TEST_CASE("unit: a connection keeps at most max_idle texts, and kept statements follow schema changes") {
  TempDb t;
  Connection c(t.open());
  exec(c, "CREATE TABLE s (a INTEGER)");
  for (std::size_t i = 0; i < Connection::max_idle + 10; ++i)
    one_text(c, "SELECT " + std::to_string(i) + " FROM (SELECT 1)");
  CHECK(c.idle() == Connection::max_idle);
  int open = 0;
  for (auto* s = sqlite3_next_stmt(c, nullptr); s; s = sqlite3_next_stmt(c, s)) ++open;
  CHECK(open == static_cast<int>(Connection::max_idle));
  // One taken out while the room is filled again is not kept past it.
  {
    Statement held(c, "SELECT 0 FROM (SELECT 1)");
    one_text(c, "SELECT 'room' FROM (SELECT 1)");
    CHECK(c.idle() == Connection::max_idle);
  }
  CHECK(c.idle() == Connection::max_idle);

  // Kept before the table changed, it is prepared again by SQLite itself.
  char const* star = "SELECT * FROM s";
  { Statement s(c, star); CHECK_FALSE(s.step()); }
  exec(c, "ALTER TABLE s ADD COLUMN b TEXT DEFAULT 'new'");
  exec(c, "INSERT INTO s (a) VALUES (7)");
  Statement s(c, star);
  REQUIRE(s.step());
  CHECK(s.text(1) == "new");
}

}  // namespace idemgate::ledger::sqlite
