// The ledger's error codes: what a caller on the request path needs to tell
// apart, carried by boost::system::error_code so nothing is thrown across the
// Store or Ledger interfaces.
#pragma once

#include <boost/system/error_code.hpp>
#include <boost/system/result.hpp>

#include <type_traits>

namespace idemgate::ledger {

enum class errc {
  // The ledger cannot take the call now (the database locked or slow past
  // its timeout). The statement that timed out wrote nothing; the proxy
  // answers 503 with Retry-After.
  busy = 1,
  // The database cannot be reached or the connection broke mid-transaction.
  // Nothing is known to be written; the proxy answers 503 ledger_unavailable.
  unavailable,
  // A concurrent writer won (serialization failure that survived a retry).
  conflict,
  // The row is not in a state the requested transition may start from.
  illegal_transition,
  not_found,
  // The database holds a schema version this binary does not know.
  newer_schema,
  invalid_argument,
  // An SQL error that is not one of the above: a bug or a corrupt database.
  storage_failure,
  // The Ledger is shutting down; the call was never run.
  shutting_down,
  // The Ledger's queue was full (LedgerOptions::queue_limit): the call was
  // never run, so making it again cannot repeat anything of it. (busy may
  // come from a statement the server cancelled after another transaction
  // of the same call committed: not so.) The proxy waits for room.
  queue_full,
  // The PostgreSQL server is older than the ledger supports (14): the
  // connection was refused before anything was sent on it. Any call may
  // answer it (after a failover to such a server); the proxy answers 503
  // ledger_unavailable, as for unavailable.
  old_server,
};

const boost::system::error_category& ledger_category() noexcept;

inline boost::system::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), ledger_category()};
}

template <class T>
using Result = boost::system::result<T>;

}  // namespace idemgate::ledger

namespace boost::system {
template <>
struct is_error_code_enum<idemgate::ledger::errc> : std::true_type {};
}  // namespace boost::system
