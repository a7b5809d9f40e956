// What a lone admission's statement needs on any PostgreSQL connection that
// sends it: PgStore's (libpqxx, on a ledger worker) and PgDirectAdmit's
// (libpq, from the caller's own thread). Free of libpqxx, so that
// pg_direct.cpp needs libpq alone.
#pragma once

#include "ledger/errc.hpp"
#include "ledger/store_support.hpp"
#include "ledger/types.hpp"

#include <poll.h>

#include <array>
#include <string>
#include <string_view>

namespace idemgate::ledger::pg {

// Whether the ledger runs on a PostgreSQL server of this version (as libpq
// gives it: 150004 for 15.4, 0 without a connection): errc::old_server
// below 14, the oldest supported (there extract() is exact numeric, so the
// times a reservation answers, computed from the statement's now(), agree
// with the stored ones to the millisecond). Checked on every connection,
// before anything is sent: opening or migrating a ledger on an older server
// fails with it, and so does every call after a failover to one.
inline boost::system::error_code check_server(int version) noexcept {
  if (version <= 0) return errc::unavailable;
  if (version < 140000) return errc::old_server;
  return {};
}

// The URL with `option` ("name=value") added, unless it sets that name
// itself.
std::string with_default(std::string url, std::string_view option);
// The URL with libpq's options bounding a silent peer (connect_timeout,
// TCP keepalives, tcp_user_timeout) unless it sets them itself.
std::string with_bounds(std::string url);

// The SET statements every connection runs first: statement_timeout (and
// lock and idle-in-transaction timeouts) bound every statement on the
// server, commits wait for the disk.
std::string session_settings(Millis statement_timeout);

// Store::admit_alone as one statement, prepared as "admit_alone" on each
// connection: the run's charge, the reservation and, when the charge counted
// and a first attempt is asked for, its first attempt.
std::string admit_alone_sql();
inline constexpr int admit_alone_param_count = 12;
// Whether a lone admission can be that one statement: not with an agent's
// key, which is checked against its bindings before anything is written
// (the batch does that).
bool admits_alone(const AdmitRequest& request);
// Its parameters, as text.
std::array<std::string, admit_alone_param_count> admit_alone_params(const AdmitRequest& request);
// Its one row (`columns` wide), for `request` (whose snapshot the row does
// not send back).
AdmitFirst read_admit_first(const detail::RowView& row, int columns, const ReserveRequest& request);

// An idle connection has nothing to read: if its socket is readable (or hung
// up), the server ended the session (restart, admin shutdown, idle timeout).
// Checking before use turns a restart into a reconnect instead of a failed
// call, and keeps the client library away from the dead connection.
inline bool ended_by_server(int socket) {
  if (socket < 0) return true;
  pollfd p{socket, POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;
}

// The server cancelled the statement (statement_timeout, lock_timeout): the
// caller is told busy.
inline bool is_timeout_state(std::string_view sqlstate) { return sqlstate == "57014" || sqlstate == "55P03"; }

// Connection failures and server shutdowns drop the connection; the rest
// keep it.
inline bool is_connection_state(std::string_view sqlstate) {
  return sqlstate.starts_with("08") || sqlstate == "57P01" || sqlstate == "57P02" || sqlstate == "57P03";
}

}  // namespace idemgate::ledger::pg
