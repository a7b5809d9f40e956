// What both Store backends share inside the ledger: the exception that aborts
// a transaction with an errc (caught at the Store boundary and returned as a
// Result), header (de)serialisation, time conversions, and the rules that
// turn a rejected compare-and-set into the reason why.
#pragma once

#include "ledger/errc.hpp"
#include "ledger/types.hpp"
#include "policy/json_string.hpp"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace idemgate::ledger::detail {

namespace swar = policy::swar;

// Thrown inside a Store transaction to roll it back with a specific error.
struct Abort {
  errc code;
};

// One result row, whichever backend produced it. Booleans are 0/1 integers,
// times epoch milliseconds.
class RowView {
 public:
  virtual ~RowView() = default;
  virtual bool is_null(int column) const = 0;
  virtual std::int64_t int64(int column) const = 0;
  virtual std::optional<std::int64_t> optional_int64(int column) const = 0;
  virtual std::string text(int column) const = 0;
  virtual std::string blob(int column) const = 0;
};

// An intent's request snapshot as both backends select it: since schema
// version 14 in redacted_request, before it in request_snapshot (a literal,
// so that intent_columns can be one; request_snapshot_column names it for
// code that looks for it there).
#define IDEMGATE_REQUEST_SNAPSHOT "coalesce(redacted_request, request_snapshot)"
inline constexpr std::string_view request_snapshot_column = IDEMGATE_REQUEST_SNAPSHOT;

// Intent rows are read in this order (each backend selects its own
// expressions for them, see intent_columns in its store):
// id, run_id, tool, scope, fingerprint, idem_key, state, answer_class,
// attempts, status, receipt, response_status, response_headers,
// response_body, response_truncated, the request snapshot (column
// redacted_request, or request_snapshot for intents written before schema
// version 14), window_ms, unknown_ttl_ms, recovered, created_at,
// updated_at, window_until, unknown_since, retry_not_before, lease_until,
// waived, looked_up_at
Intent read_intent(const RowView& row);
// id, run_id, intent_id, reason_code, package, state, receipt, note,
// created_at, resolved_at, resolved_by
Escalation read_escalation(const RowView& row);

// Headers as a JSON array of [name, value] pairs.
std::string encode_headers(const Headers& headers);
using policy::append_json_string;  // the ledger's hot paths write JSON without a document
// Room enough for headers as JSON [name, value] pairs (a reserve's estimate).
inline std::size_t headers_json_size(const Headers& headers) {
  std::size_t size = 2;
  for (const auto& [n, v] : headers) size += n.size() + v.size() + 8;
  return size;
}
// headers as the JSON array of [name, value] pairs encode_headers stores,
// appended to out, but for those whose name `drop` is true of.
template <class Drop>
void append_headers_json(std::string& out, const Headers& headers, Drop drop) {
  out += '[';
  bool first = true;
  for (const auto& [n, v] : headers) {
    if (drop(n)) continue;
    out += first ? "[" : ",[";
    first = false;
    append_json_string(out, n);
    out += ',';
    append_json_string(out, v);
    out += ']';
  }
  out += ']';
}
Headers decode_headers(std::string_view json);

inline TimePoint from_epoch_ms(std::int64_t ms) { return TimePoint(Millis(ms)); }
inline std::int64_t to_epoch_ms(TimePoint t) { return t.time_since_epoch().count(); }
inline std::int64_t now_epoch_ms() {
  return std::chrono::duration_cast<Millis>(Clock::now().time_since_epoch()).count();
}

// Why begin_attempt's compare-and-set did not start an attempt, from the row
// as it is now: changed when it is not what the verdict was made from.
AttemptOutcome refusal_reason(const Intent& intent, const AttemptRequest& request);

// Why set_run_state may move from `from` to `to`.
bool run_transition_allowed(RunState from, RunState to);

// Why a charge was not counted, from the run as it is now.
ChargeOutcome charge_refusal(const Run& run, CallKind kind);

// The fields a reservation cannot do without are present.
bool valid(const ReserveRequest& request);

}  // namespace idemgate::ledger::detail
