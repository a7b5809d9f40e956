// A thin RAII layer over sqlite3 for SqliteStore: a prepared statement with
// typed binds and column reads. Errors throw SqliteError, which SqliteStore
// turns into a Result at its boundary; nothing here escapes the ledger.
#pragma once

#include "ledger/store_support.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>

struct sqlite3;
struct sqlite3_stmt;

namespace idemgate::ledger::sqlite {

struct SqliteError : std::runtime_error {
  SqliteError(int code, const std::string& what) : std::runtime_error(what), code(code) {}
  int code;  // primary result code (SQLITE_BUSY...)
};

// Throws SqliteError when rc is not SQLITE_OK/ROW/DONE.
void check(sqlite3* db, int rc, std::string_view context);

// Runs SQL text (several statements allowed) with no results.
void exec(sqlite3* db, std::string_view sql);

class Statement;

// A database connection and the statements it has prepared. A Statement
// made on it takes the statement prepared for the same text the last time
// (reset, its bindings cleared) instead of parsing and planning the text
// again: parsing had been 61% of the instructions of a guarded write on a
// SQLite ledger. At most `max_idle` texts are kept (the texts built with a
// variable number of terms would otherwise grow it without end); past
// that a statement is finalized when done, as before, even one taken from
// it (given back while others of its texts took the room). Owns the handle:
// closes it (after finalizing what it kept) when destroyed.
class Connection final {
 public:
  explicit Connection(sqlite3* db) : db_(db) { idle_.reserve(max_idle + 16); }
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  operator sqlite3*() const noexcept { return db_; }  // NOLINT: the handle, for the C API
  std::size_t idle() const noexcept { return idle_.size(); }

  static constexpr std::size_t max_idle = 64;

 private:
  friend class Statement;
  struct Hash {
    using is_transparent = void;
    // The length and the first and last 32 bytes: the texts are long
    // (hashing whole ones was 3% of a write) and differ there or in length;
    // equal hashes are told apart by comparing the whole text.
    std::size_t operator()(std::string_view s) const noexcept {
      std::hash<std::string_view> h;
      if (s.size() <= 64) return h(s);
      return h(s.substr(0, 32)) ^ (h(s.substr(s.size() - 32)) * 31) ^ (s.size() * 0x9e3779b97f4a7c15ULL);
    }
  };
  using Idle = std::unordered_map<std::string, sqlite3_stmt*, Hash, std::equal_to<>>;

  sqlite3* db_;
  Idle idle_;
};

class Statement final : public detail::RowView {
 public:
  // Prepared anew, finalized when done.
  Statement(sqlite3* db, std::string_view sql);
  // Taken from the connection's idle statements when it has one for `sql`,
  // given back to them when done.
  Statement(Connection& connection, std::string_view sql);
  ~Statement() override;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Binds are 1-based, like SQLite's.
  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, std::int64_t value);
  Statement& bind(int index, std::optional<std::int64_t> value);
  Statement& bind_blob(int index, std::string_view bytes);
  Statement& bind_null(int index);

  // true while a row is available.
  bool step();
  // Steps through to the end; returns sqlite3_changes().
  int run();

  bool is_null(int column) const override;
  std::int64_t int64(int column) const override;
  std::optional<std::int64_t> optional_int64(int column) const override;
  std::string text(int column) const override;
  std::string blob(int column) const override;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  Connection* connection_ = nullptr;  // given back to it when done
  Connection::Idle::node_type taken_;  // its key and slot, when it was idle there
  std::string text_;                   // the text, when it was prepared here for the connection
};

}  // namespace idemgate::ledger::sqlite
