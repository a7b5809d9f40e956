// What the SQLite backend's files (sqlite_store.cpp, sqlite_intents.cpp,
// sqlite_runs.cpp) share, included by them only: the column lists, the
// error mapping, and what every method body runs in: its own transaction
// (transact()) or, inside batch(), a savepoint of the batch's one
// transaction (in_savepoint()). SqliteError and detail::Abort thrown inside
// become Results there. Templates, so defined here.
#pragma once

#include "ledger/sqlite_store.hpp"

#include "ledger/sqlite_statement.hpp"
#include "ledger/store_support.hpp"

#include <sqlite3.h>

#include <string>
#include <string_view>
#include <type_traits>

namespace idemgate::ledger {

using sqlite::Statement;
using namespace detail;

namespace sq {

inline constexpr std::string_view intent_columns =
    "id, run_id, tool, scope, fingerprint, idem_key, state, answer_class, attempts, status, "
    "receipt, response_status, response_headers, response_body, response_truncated, "
    IDEMGATE_REQUEST_SNAPSHOT ", window_ms, unknown_ttl_ms, recovered, created_at, updated_at, "
    "window_until, unknown_since, retry_not_before, CASE WHEN state = 'dispatched' THEN lease_until END, waived, "
    "looked_up_at";

inline constexpr std::string_view escalation_columns =
    "id, run_id, intent_id, reason_code, package, state, receipt, note, created_at, resolved_at, "
    "resolved_by";

inline boost::system::error_code map_sqlite(int code) {
  switch (code) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return errc::busy;
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT: return errc::unavailable;
    default: return errc::storage_failure;
  }
}

inline std::string sql(std::string_view a, std::string_view b = {}, std::string_view c = {}) {
  std::string s(a);
  s += b;
  s += c;
  return s;
}

}  // namespace sq

using namespace sq;

template <class F>
auto SqliteStore::in_savepoint(F& body) -> Result<std::invoke_result_t<F&>> {
  using T = std::invoke_result_t<F&>;
  if (batch_error_) return batch_error_;
  try {
    sqlite::exec(db_, "SAVEPOINT job");
  } catch (const sqlite::SqliteError& e) {
    batch_error_ = map_sqlite(e.code);
    return batch_error_;
  }
  boost::system::error_code error;
  try {
    if constexpr (std::is_void_v<T>) {
      body();
      sqlite::exec(db_, "RELEASE job");
      return {};
    } else {
      T value = body();
      sqlite::exec(db_, "RELEASE job");
      return value;
    }
  } catch (const Abort& a) {
    error = a.code;
  } catch (const sqlite::SqliteError& e) {
    error = map_sqlite(e.code);
  } catch (const std::exception&) {
    error = errc::storage_failure;
  }
  // Some errors (I/O, disk full) make SQLite roll the whole transaction back:
  // then the batch has failed. Otherwise only this method's part is undone,
  // and with Calls::together the batch fails too (nothing of it is written).
  if (sqlite3_get_autocommit(db_) || together_) {
    batch_error_ = error;
  } else if (sqlite3_exec(db_, "ROLLBACK TO job; RELEASE job", nullptr, nullptr, nullptr) !=
             SQLITE_OK) {
    batch_error_ = errc::storage_failure;
  }
  return error;
}

template <class F>
auto SqliteStore::transact(Lock lock, F&& body) -> Result<std::invoke_result_t<F&>> {
  using T = std::invoke_result_t<F&>;
  if (in_batch_) return in_savepoint(body);
  try {
    // IMMEDIATE takes the write lock up front, so a read-then-write inside
    // never deadlocks against another writer (it waits busy_timeout instead).
    sqlite::exec(db_, lock == Lock::write ? "BEGIN IMMEDIATE" : "BEGIN");
  } catch (const sqlite::SqliteError& e) {
    return map_sqlite(e.code);
  }
  try {
    if constexpr (std::is_void_v<T>) {
      body();
      sqlite::exec(db_, "COMMIT");
      return {};
    } else {
      T value = body();
      sqlite::exec(db_, "COMMIT");
      return value;
    }
  } catch (const Abort& a) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return boost::system::error_code(a.code);
  } catch (const sqlite::SqliteError& e) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return map_sqlite(e.code);
  } catch (const std::exception&) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return boost::system::error_code(errc::storage_failure);
  }
}

}  // namespace idemgate::ledger
