// The ledger's error codes: what a caller on the request path needs to tell
// apart, carried by boost::system::error_code so nothing is thrown across the
// Store or Ledger interfaces.
#pragma once

#include <boost/system/error_code.hpp>
#include <boost/system/result.hpp>

#include <type_traits>

namespace idemgate::ledger {

enum class errc {
  // The ledger cannot take the call now (queue full, database locked past its
  // timeout). Nothing was written; the proxy answers 503 with Retry-After.
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
