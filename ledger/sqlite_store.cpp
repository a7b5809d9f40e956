// The SQLite backend (see sqlite_store.hpp): opening the database, batch()
// and migrate(). What every method body runs in is in sqlite_support.hpp;
// the bodies themselves in sqlite_intents.cpp and sqlite_runs.cpp.
#include "ledger/sqlite_store.hpp"

#include "ledger/migrations.hpp"
#include "ledger/sqlite_support.hpp"

#include <utility>

namespace idemgate::ledger {

Result<std::unique_ptr<SqliteStore>> SqliteStore::open(const std::string& path,
                                                       Millis busy_timeout) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  std::unique_ptr<SqliteStore> store(new SqliteStore(db));
  if (rc != SQLITE_OK) return boost::system::error_code(errc::unavailable);
  try {
    sqlite3_busy_timeout(db, static_cast<int>(busy_timeout.count()));
    // WAL + FULL: a committed reservation survives power loss, and readers do
    // not block the writer.
    sqlite::exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;");
  } catch (const sqlite::SqliteError& e) {
    return map_sqlite(e.code);
  }
  return store;
}

SqliteStore::~SqliteStore() = default;  // db_ closes the connection

boost::system::error_code SqliteStore::batch(const std::function<void()>& body, Calls calls, Durability durability) {
  if (in_batch_) return errc::invalid_argument;
  // Savepoints cost nothing here (no round trip): Calls::together keeps them
  // and only makes the first failure the batch's.
  together_ = calls == Calls::together;
  // In WAL mode, NORMAL commits without syncing the WAL: a crash of this
  // process loses nothing, a power cut may lose the last such commits (the
  // next FULL commit syncs them with its own).
  struct Synchronous {
    sqlite3* db;
    bool deferred;
    Synchronous(sqlite3* d, bool lazy) : db(d), deferred(lazy) {
      if (deferred) sqlite3_exec(db, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr);
    }
    ~Synchronous() {
      if (!deferred) return;
      // The level cannot change inside a transaction: one left open by a
      // failed ROLLBACK is ended first, or the next admission would commit
      // at NORMAL.
      if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      sqlite3_exec(db, "PRAGMA synchronous=FULL", nullptr, nullptr, nullptr);
    }
  } synchronous(db_, durability == Durability::deferred);
  try {
    sqlite::exec(db_, "BEGIN IMMEDIATE");
  } catch (const sqlite::SqliteError& e) {
    return map_sqlite(e.code);
  }
  in_batch_ = true;
  batch_error_ = {};
  try {
    body();
  } catch (const std::exception&) {
    if (!batch_error_) batch_error_ = errc::storage_failure;
  }
  in_batch_ = false;
  if (!batch_error_) {
    try {
      sqlite::exec(db_, "COMMIT");
      return {};
    } catch (const sqlite::SqliteError& e) {
      batch_error_ = map_sqlite(e.code);
    }
  }
  if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  return std::exchange(batch_error_, {});
}

Result<int> SqliteStore::migrate() {
  return transact(Lock::write, [&] {
    sqlite::exec(db_,
                 "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                 "name TEXT NOT NULL, applied_at INTEGER NOT NULL DEFAULT 0)");
    // Done (reset) before the scripts run: a DROP fails (SQLITE_LOCKED)
    // while a statement of the connection is still running.
    int version = [&] {
      Statement current(db_, "SELECT coalesce(max(version), 0) FROM schema_version");
      current.step();
      return static_cast<int>(current.int64(0));
    }();
    auto migrations = sqlite_migrations();
    if (version > latest_version(migrations)) throw Abort{errc::newer_schema};
    for (const auto& m : migrations) {
      if (m.version <= version) continue;
      sqlite::exec(db_, m.sql);
      Statement(db_, "INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)")
          .bind(1, std::int64_t{m.version})
          .bind(2, m.name)
          .bind(3, now_epoch_ms())
          .run();
      version = m.version;
    }
    return version;
  });
}

}  // namespace idemgate::ledger
