// What the PostgreSQL backend's files (pg_store.cpp, pg_intents.cpp, pg_reads.cpp,
// pg_runs.cpp, pg_escalations.cpp) share, included by them only: it keeps
// pqxx out of pg_store.hpp. Values are inlined with pqxx's
// quote()/quote_raw() (libpq escaping), except in the hottest statements (a
// lone admission, a batch's reservations and its outcomes), which are
// prepared once per connection (PgStore::connect) and take their rows as
// array parameters (ArrayParam). Every method body runs either as its own
// transaction or, inside batch(), between SAVEPOINT and RELEASE (ROLLBACK TO
// on error) of the batch's one transaction: transact() and in_savepoint(),
// templates, so defined here.
#pragma once

#include "ledger/pg_admit.hpp"
#include "ledger/pg_store.hpp"
#include "ledger/store_support.hpp"

#include <pqxx/pqxx>

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace idemgate::ledger {

using namespace detail;
using boost::system::error_code;

namespace pg {

#define IDEMGATE_MS(column) "(extract(epoch from " column ") * 1000)::bigint"
inline constexpr std::string_view intent_columns =
    "id, run_id, tool, scope, fingerprint, idem_key, state, answer_class, attempts, status, "
    "receipt, response_status, response_headers, response_body, response_truncated::int, "
    IDEMGATE_REQUEST_SNAPSHOT ", window_ms, unknown_ttl_ms, recovered::int, " IDEMGATE_MS("created_at") ", "
    IDEMGATE_MS("updated_at") ", " IDEMGATE_MS("window_until") ", " IDEMGATE_MS("unknown_since")
    ", " IDEMGATE_MS("retry_not_before") ", "
    IDEMGATE_MS("CASE WHEN state = 'dispatched' THEN lease_until END") ", waived, " IDEMGATE_MS("looked_up_at");
// What a reservation's insert returns (reserve_intents_sql): only rows it
// inserted, each as its id, what matches it to its request (scope,
// fingerprint, key), the statement's now() and the lease it set (NULL when
// it began no attempt; read_reserved takes the rest from the request).
inline constexpr std::string_view reserved_columns =
    "ins.id, ins.scope, ins.fingerprint, ins.idem_key, now_ms.ms, " IDEMGATE_MS("ins.lease_until");
// The lease sweep's lock (schema version 10), a transaction-level advisory
// lock. A statement that begins a first attempt with its reservation takes
// it shared, as a CTE its insert reads FROM, and only then reads the clock
// for the lease (clock_timestamp()); PgStore::recover_expired takes it
// exclusively to read the time its sweep may reach: a lease not committed
// by then is set after it, and so ends after it.
#define IDEMGATE_LEASE_LOCK_KEY "5926017403921"
inline constexpr std::string_view lease_lock =
    "lease_lock AS MATERIALIZED (SELECT pg_advisory_xact_lock_shared(" IDEMGATE_LEASE_LOCK_KEY ") AS held)";
inline constexpr std::string_view lease_horizon_lock = "SELECT pg_advisory_xact_lock(" IDEMGATE_LEASE_LOCK_KEY ")";
#undef IDEMGATE_LEASE_LOCK_KEY
inline constexpr std::string_view escalation_columns =
    "id, run_id, intent_id, reason_code, package, state, receipt, note, "
    IDEMGATE_MS("created_at") ", " IDEMGATE_MS("resolved_at") ", resolved_by";
#undef IDEMGATE_MS

// Holds its row by value: rows[0] is a temporary (a row is a handle on the
// result, cheap to copy), and a reference to it dangles at the semicolon.
class PgRow final : public RowView {
 public:
  explicit PgRow(pqxx::row row) : row_(std::move(row)) {}
  bool is_null(int c) const override { return row_[c].is_null(); }
  std::int64_t int64(int c) const override { return row_[c].as<long long>(0); }
  std::optional<std::int64_t> optional_int64(int c) const override {
    if (is_null(c)) return std::nullopt;
    return int64(c);
  }
  std::string text(int c) const override {
    return is_null(c) ? std::string() : std::string(row_[c].c_str(), row_[c].size());
  }
  std::string blob(int c) const override {
    return is_null(c) ? std::string() : pqxx::binarystring(row_[c]).str();
  }

 private:
  pqxx::row row_;
};

inline std::string q(pqxx::transaction_base& w, std::string_view text) { return w.quote(std::string(text)); }
inline std::string q(pqxx::transaction_base&, std::optional<std::int64_t> value) {
  return value ? std::to_string(*value) : "NULL";
}
inline std::string q_millis(Millis ms) { return "(" + std::to_string(ms.count()) + " * interval '1 millisecond')"; }

// SELECT of intent_columns from intents WHERE `where`.
inline std::string select_intents(std::string_view where) {
  std::string s = "SELECT ";
  s += intent_columns;
  s += " FROM intents WHERE ";
  s += where;
  return s;
}

// A statement, to send before (and with) one that changes these intents
// (`ids`, comma-separated): writes the attempts rows of the answered first
// attempts they keep (schema version 12, idemgate_keep_first_attempts).
// Only an intent with one attempt can keep one.
inline std::string keep_first_attempts(std::string_view ids) {
  return "SELECT idemgate_keep_first_attempts(ARRAY[" + std::string(ids) + "]::bigint[]); ";
}

// Intent `id` as it is now; Abort{not_found} when there is none.
inline Intent load_intent(pqxx::transaction_base& w, std::int64_t id) {
  auto rows = w.exec(select_intents("id = " + std::to_string(id)));
  if (rows.empty()) throw Abort{errc::not_found};
  return read_intent(PgRow(rows[0]));
}

// One parameter of a prepared statement that carries a column of many rows:
// a one-dimensional PostgreSQL array in the server's binary format (what
// array_send writes and array_recv reads), passed as a binary parameter.
// With unnest() in the statement, a batch of any size runs one plan, made
// once per connection. Binary, each value goes as it is, after its length:
// nothing is quoted or escaped here, and the server parses no literal
// (array_in), where snapshots and answers are most of a batch's bytes. The
// element type is the one the statement's cast names ($1::bigint[] holds
// int8): the server refuses any other ("wrong element type").
class ArrayParam {
 public:
  // pg_type OIDs, fixed in every PostgreSQL.
  enum class Of : std::uint32_t { boolean = 16, bytea = 17, int8 = 20, int4 = 23, text = 25 };

  explicit ArrayParam(Of element) : element_(element) { data_.resize(header_size); }

  // A text element.
  ArrayParam& text(std::string_view value) {
    assert(element_ == Of::text);
    put(value);
    return *this;
  }
  ArrayParam& bytes(std::string_view value) {
    assert(element_ == Of::bytea);
    put(value);
    return *this;
  }
  // An int8 element, or an int4's: one that does not fit is refused, as
  // the server refused it in a text array, never cut.
  ArrayParam& number(std::int64_t value) {
    if (element_ == Of::int4) {
      if (value < INT32_MIN || value > INT32_MAX) throw Abort{errc::invalid_argument};
      put32(4);
      put32(static_cast<std::uint32_t>(static_cast<std::int32_t>(value)));
    } else {
      assert(element_ == Of::int8);
      put32(8);
      put32(static_cast<std::uint32_t>(static_cast<std::uint64_t>(value) >> 32));
      put32(static_cast<std::uint32_t>(value));
    }
    ++count_;
    return *this;
  }
  ArrayParam& flag(bool value) {
    assert(element_ == Of::boolean);
    put(value ? std::string_view("\1", 1) : std::string_view("\0", 1));
    return *this;
  }
  ArrayParam& null() {
    put32(0xffffffffu);  // a length of -1
    has_null_ = true;
    ++count_;
    return *this;
  }
  template <class T>
  ArrayParam& number_or_null(const std::optional<T>& value) {
    return value ? number(static_cast<std::int64_t>(*value)) : null();
  }

  // The array as the parameter's value. Empty, it has no dimension at all,
  // as array_send writes one.
  pqxx::binarystring param() {
    auto* out = data_.data();
    auto write = [&](std::uint32_t v) {
      for (int shift = 24; shift >= 0; shift -= 8) *out++ = static_cast<char>(v >> shift);
    };
    write(count_ ? 1 : 0);  // dimensions
    write(has_null_ ? 1 : 0);
    write(static_cast<std::uint32_t>(element_));
    if (!count_) return pqxx::binarystring(data_.data(), header_size - 8);
    write(count_);  // the dimension's size, then its lower bound
    write(1);
    return pqxx::binarystring(data_.data(), data_.size());
  }

 private:
  static constexpr std::size_t header_size = 20;

  void put32(std::uint32_t v) {
    char const be[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                        static_cast<char>(v)};
    data_.append(be, 4);
  }
  void put(std::string_view value) {
    assert(value.size() <= INT32_MAX);
    put32(static_cast<std::uint32_t>(value.size()));
    data_.append(value);
    ++count_;
  }

  Of element_;
  std::uint32_t count_ = 0;
  bool has_null_ = false;
  std::string data_;
};

// A subtransaction whose SAVEPOINT is sent at once. libpqxx 6.4 sends it
// lazily, on the first exec(), but not on exec_prepared() or exec_params():
// a prepared statement first in a subtransaction ran in the batch's own
// transaction, and its failure aborted the batch (25P02 for every call after
// it) instead of rolling back to a savepoint that was never made.
class Savepoint final : public pqxx::subtransaction {
 public:
  Savepoint(pqxx::dbtransaction& parent, const std::string& name)
      : pqxx::internal::namedclass("subtransaction", name), pqxx::subtransaction(parent, name) {
    Begin();
  }
};

}  // namespace pg

using namespace pg;

struct PgStore::Connection {
  explicit Connection(const std::string& url) : c(url) {}
  pqxx::connection c;
};

struct PgStore::OpenBatch {
  OpenBatch(pqxx::connection& c, Calls calls) : w(c), together(calls == Calls::together) {}
  pqxx::work w;
  bool together;     // no savepoints: the first failing call fails the batch
  error_code error;  // set when the transaction itself failed
};

template <class T, class F>
Result<T> PgStore::in_savepoint(F& body) {
  auto& b = *batch_;
  if (b.error) return Result<T>(b.error);
  auto fail_batch = [&](error_code why) {
    b.error = why;
    return Result<T>(b.error);
  };
  for (int attempt = 0;; ++attempt) {
    // Between statements the socket has nothing to read unless the server
    // ended the session: fail the batch without sending on a dead connection.
    if (ended_by_server(connection_->c.sock())) return fail_batch(errc::unavailable);
    error_code error;
    try {
      if (b.together) {
        // One caller's calls: a savepoint is two round trips for nothing,
        // since any failure fails that caller (below: the batch rolls back).
        if constexpr (std::is_void_v<T>) {
          body(b.w);
          return Result<T>();
        } else {
          return Result<T>(body(b.w));
        }
      }
      // SAVEPOINT; RELEASE on commit(); ROLLBACK TO on an error (libpqxx
      // rolls back the transaction a failed statement ran in: here only the
      // subtransaction, the batch goes on).
      Savepoint sub(b.w, "job");
      if constexpr (std::is_void_v<T>) {
        body(sub);
        sub.commit();
        return Result<T>();
      } else {
        T value = body(sub);
        sub.commit();
        return Result<T>(std::move(value));
      }
    } catch (const Abort& a) {
      error = a.code;
    } catch (const pqxx::broken_connection&) {
      return fail_batch(errc::unavailable);
    } catch (const pqxx::in_doubt_error&) {
      return fail_batch(errc::unavailable);
    } catch (const pqxx::transaction_rollback&) {
      // Deadlock or serialisation failure: rolling back to the savepoint
      // released this call's locks; run it again, a bounded number of times.
      if (!b.together && attempt < 3) continue;
      error = errc::conflict;
    } catch (const pqxx::sql_error& e) {
      if (is_connection_state(e.sqlstate())) return fail_batch(errc::unavailable);
      // The batch's transaction is aborted (a savepoint was not rolled back).
      if (e.sqlstate() == "25P02") return fail_batch(errc::storage_failure);
      error = is_timeout_state(e.sqlstate()) ? errc::busy : errc::storage_failure;
    } catch (const std::exception&) {
      error = errc::storage_failure;
    }
    // Without a savepoint what the call did cannot be undone alone: nothing
    // of the batch is written.
    if (b.together) return fail_batch(error);
    return Result<T>(error);
  }
}

template <class F>
auto PgStore::transact(F&& body, Commit commit) {
  using T = std::invoke_result_t<F&, pqxx::transaction_base&>;
  if (batch_) return in_savepoint<T>(body);
  auto run = [&](auto&& w) -> Result<T> {
    if constexpr (std::is_void_v<T>) {
      body(w);
      w.commit();
      return Result<T>();
    } else {
      T value = body(w);
      w.commit();
      return Result<T>(std::move(value));
    }
  };
  // Deadlocks and serialisation failures roll back with nothing written:
  // the transaction is simply run again, a bounded number of times.
  for (int attempt = 0;; ++attempt) {
    if (auto ec = connect()) return Result<T>(ec);
    try {
      if (commit == Commit::one_statement) return run(pqxx::nontransaction(connection_->c));
      return run(pqxx::work(connection_->c));
    } catch (const Abort& a) {
      return Result<T>(error_code(a.code));
    } catch (const pqxx::broken_connection&) {
      drop_connection();
      return Result<T>(error_code(errc::unavailable));
    } catch (const pqxx::in_doubt_error&) {
      // The commit's fate is unknown: the caller fails closed and its retry
      // finds whatever did get committed.
      drop_connection();
      return Result<T>(error_code(errc::unavailable));
    } catch (const pqxx::transaction_rollback&) {
      if (attempt < 3) continue;
      return Result<T>(error_code(errc::conflict));
    } catch (const pqxx::sql_error& e) {
      if (is_connection_state(e.sqlstate())) {
        drop_connection();
        return Result<T>(error_code(errc::unavailable));
      }
      if (is_timeout_state(e.sqlstate())) return Result<T>(error_code(errc::busy));
      return Result<T>(error_code(errc::storage_failure));
    } catch (const std::exception&) {
      drop_connection();
      return Result<T>(error_code(errc::storage_failure));
    }
  }
}

}  // namespace idemgate::ledger
