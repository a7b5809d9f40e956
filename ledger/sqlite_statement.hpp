// A thin RAII layer over sqlite3 for SqliteStore: a prepared statement with
// typed binds and column reads. Errors throw SqliteError, which SqliteStore
// turns into a Result at its boundary; nothing here escapes the ledger.
#pragma once

#include "ledger/store_support.hpp"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

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

class Statement final : public detail::RowView {
 public:
  Statement(sqlite3* db, std::string_view sql);
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
};

}  // namespace idemgate::ledger::sqlite
