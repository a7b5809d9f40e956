// Recording the world's evidence when the ledger stumbles: an attempt's
// outcome (or an escalation package after something was sent) is tried a
// few times on the request path, then handed to a background task that
// keeps trying, with backoff, until it lands or the attempt's lease (plus a
// margin) has passed. Bounded: past kMaxPending tasks the newest is dropped
// and logged; the lease then turns the attempt unknown and it is reconciled,
// so a lost record costs a reconciliation, never a duplicate.
#pragma once

#include "ledger/types.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <optional>

namespace idemgate::ledger {
class Ledger;
}

namespace idemgate::proxy {

inline constexpr int kMaxPendingRecords = 4096;

// The intent as recorded, or nullopt when it could not be recorded yet (the
// background task has it) or was refused as an illegal transition.
boost::asio::awaitable<std::optional<ledger::Intent>> record_outcome(ledger::Ledger& ledger, ledger::Outcome outcome,
                                                                     ledger::TimePoint keep_trying_until);

void persist_escalation_later(boost::asio::any_io_executor executor, ledger::Ledger& ledger,
                              ledger::EscalationRequest request);

// Background records not landed yet (a gauge).
int pending_records() noexcept;

}  // namespace idemgate::proxy
