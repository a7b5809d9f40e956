// The sqlite3 RAII layer (see sqlite_statement.hpp).
#include "ledger/sqlite_statement.hpp"

#include <sqlite3.h>

namespace idemgate::ledger::sqlite {

void check(sqlite3* db, int rc, std::string_view context) {
  if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return;
  std::string what(context);
  what += ": ";
  what += db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  throw SqliteError(rc & 0xff, what);
}

void exec(sqlite3* db, std::string_view sql) {
  std::string text(sql);
  check(db, sqlite3_exec(db, text.c_str(), nullptr, nullptr, nullptr), "exec");
}

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db) {
  check(db_, sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr),
        "prepare");
}

Statement::Statement(Connection& connection, std::string_view sql)
    : db_(connection.db_), connection_(&connection) {
  if (auto found = connection.idle_.find(sql); found != connection.idle_.end()) {
    taken_ = connection.idle_.extract(found);
    stmt_ = taken_.mapped();
    return;
  }
  text_ = sql;
  check(db_, sqlite3_prepare_v3(db_, text_.data(), static_cast<int>(text_.size()), SQLITE_PREPARE_PERSISTENT,
                                &stmt_, nullptr),
        "prepare");
}

Statement::~Statement() {
  if (!connection_ || !stmt_) {
    sqlite3_finalize(stmt_);
    return;
  }
  // Reset ends what a step left open (a read of the database, an error);
  // the next user binds every parameter anew.
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  auto& idle = connection_->idle_;
  // Room is reserved for the bound (no rehash); the key's node of a new
  // text can still fail to allocate, and a destructor must not throw.
  try {
    if (idle.size() >= Connection::max_idle) {
      sqlite3_finalize(stmt_);
    } else if (!taken_.empty()) {
      // Another statement of the same text, given back first, keeps the slot.
      if (!idle.insert(std::move(taken_)).inserted) sqlite3_finalize(stmt_);
    } else if (!idle.try_emplace(std::move(text_), stmt_).second) {
      sqlite3_finalize(stmt_);
    }
  } catch (...) {
    sqlite3_finalize(stmt_);
  }
}

Connection::~Connection() {
  for (auto& [text, stmt] : idle_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

Statement& Statement::bind(int index, std::string_view text) {
  // An empty view may have no data(); SQLite would bind that as NULL.
  check(db_,
        sqlite3_bind_text(stmt_, index, text.data() ? text.data() : "", static_cast<int>(text.size()),
                          SQLITE_TRANSIENT),
        "bind");
  return *this;
}

Statement& Statement::bind(int index, std::int64_t value) {
  check(db_, sqlite3_bind_int64(stmt_, index, value), "bind");
  return *this;
}

Statement& Statement::bind(int index, std::optional<std::int64_t> value) {
  return value ? bind(index, *value) : bind_null(index);
}

Statement& Statement::bind_blob(int index, std::string_view bytes) {
  check(db_,
        sqlite3_bind_blob64(stmt_, index, bytes.data() ? bytes.data() : "", bytes.size(),
                            SQLITE_TRANSIENT),
        "bind");
  return *this;
}

Statement& Statement::bind_null(int index) {
  check(db_, sqlite3_bind_null(stmt_, index), "bind");
  return *this;
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  check(db_, rc, "step");
  return rc == SQLITE_ROW;
}

int Statement::run() {
  while (step()) {
  }
  return sqlite3_changes(db_);
}

bool Statement::is_null(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

std::int64_t Statement::int64(int column) const { return sqlite3_column_int64(stmt_, column); }

std::optional<std::int64_t> Statement::optional_int64(int column) const {
  if (is_null(column)) return std::nullopt;
  return int64(column);
}

std::string Statement::text(int column) const {
  auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
  return p ? std::string(p, sqlite3_column_bytes(stmt_, column)) : std::string();
}

std::string Statement::blob(int column) const {
  auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_, column));
  return p ? std::string(p, sqlite3_column_bytes(stmt_, column)) : std::string();
}

}  // namespace idemgate::ledger::sqlite
