// Recording the world's evidence when the ledger stumbles: an attempt's
// outcome (or an escalation package after something was sent) is tried a
// few times on the request path, then handed to a background task that
// keeps trying, with backoff, until it lands or the attempt's lease (plus a
// margin) has passed. Bounded: past kMaxPending tasks the newest is dropped
// and logged; the lease then turns the attempt unknown and it is reconciled,
// so a lost record costs a reconciliation, never a duplicate.
//
// After an answer the outcome is off the agent's path: record_after_answer
// returns at once and the record joins the ledger's next group commit, one
// that does not wait for the disk (Outcome::after_answer). Until it has
// committed (or been given up), pending_outcome() shows it to a retry
// reaching this process, so the retry sees the answer instead of an attempt
// still in flight. A crash meanwhile (of this process, or of the database
// before the record reached its disk) leaves the attempt to its lease, then
// unknown, then reconciliation. A later durable commit that read the record
// makes it durable too (the log is written in order).
#pragma once

#include "ledger/types.hpp"
#include "ledger/executor.hpp"

#include <chrono>
#include <optional>

namespace idemgate::ledger {
class Ledger;
}

namespace idemgate::proxy {

inline constexpr int kMaxPendingRecords = 4096;

// The intent as recorded, or nullopt when it could not be recorded yet (the
// background task has it) or was refused as an illegal transition.
Task<std::optional<ledger::Intent>> record_outcome(ledger::Ledger& ledger, ledger::Outcome outcome,
                                                                     ledger::TimePoint keep_trying_until);

// Hands `outcome` (of attempt `outcome.attempt` of `before`) to a background
// record and returns the intent as it is once recorded, without the stored
// answer (the caller has the answer itself) and without the request snapshot
// (the escalation sweeper's, read from the ledger); a retry that reaches this
// process meanwhile finds it whole through pending_outcome.
ledger::Intent record_after_answer(Executor executor, ledger::Ledger& ledger,
                                   ledger::Outcome outcome, ledger::TimePoint keep_trying_until,
                                   ledger::Intent before);

// The intent as attempt `attempt`'s outcome, not durable yet, will leave it.
std::optional<ledger::Intent> pending_outcome(const ledger::Ledger& ledger, std::int64_t intent_id, int attempt);

// `intent` as it will be once its pending outcome is durable (unchanged when
// none is pending): what an operator's view of this process shows.
void show_pending_outcome(const ledger::Ledger& ledger, ledger::Intent& intent);

// Waits (up to `within`) until that outcome is no longer pending: true when
// it is not.
Task<bool> outcome_landed(const ledger::Ledger& ledger, std::int64_t intent_id, int attempt,
                                            std::chrono::milliseconds within);

// Waits (at most `within`) until no outcome of `run` and `tool` with answer
// class `answer_class` is pending: counts of such outcomes read from the
// ledger then include them (each lane commits on its own, so an outcome
// recorded after its answer may land after a later request's admission).
// false: some were still pending at the end.
Task<bool> run_outcomes_landed(const ledger::Ledger& ledger, const std::string& run,
                                                 const std::string& tool, const std::string& answer_class,
                                                 std::chrono::milliseconds within);

void persist_escalation_later(Executor executor, ledger::Ledger& ledger,
                              ledger::EscalationRequest request);

// Background records not landed yet (a gauge).
int pending_records() noexcept;

}  // namespace idemgate::proxy
