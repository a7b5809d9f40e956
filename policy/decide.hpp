// The decision of SPEC section 2 for one request matched to a tool: a pure
// function of plain data. The wire/ledger side gathers the inputs (ledger
// view of the intent, run state, binding facts), calls decide(), and carries
// out the verdict; nothing here does I/O or reads a clock.
//
// Order (first that applies wins):
//   1. run killed                         -> refuse run_killed (abort)
//   2. write already completed            -> replay the stored response
//   3. ledger could not be read/written   -> refuse ledger_unavailable (503)
//   4. tool policy deny                   -> refuse policy_deny (abort)
//      pending_approval, not yet approved -> refuse pending_approval
//   5. required fields missing            -> refuse missing_slot (422);
//      key mode require without a key     -> refuse missing_slot (400)
//   6. agent key bound to another payload -> refuse key_payload_mismatch (422);
//      payload bound to another key       -> enforce: go on with the original
//                                            key; strict: refuse (422)
//   7. reads: dispatch (holding out a Retry-After) until the same failing
//      fingerprint passes the bound       -> refuse tool_retry_exhausted
//   8. writes, by ledger state:
//      frozen run                         -> refuse run_frozen
//      denied(class)                      -> refuse reason_for_denied(class)
//      unknown, past reconcile.ttl or mode none, or re-sent past the bound
//                                         -> refuse money_unknown / tool_outcome_unknown (422)
//      unknown, same_key                  -> reconcile(same_key): re-send the key
//      unknown, query, not yet asked      -> reconcile(query): look it up
//      unknown, query, not found for settle -> dispatch(retry) with the same key
//      unknown, reconciled earlier in this request and still unknown
//                                         -> hold (back off, then decide again) while
//                                            reconcile.inline lasts, else wait 409 reconciling
//      in flight (a live lease, any process) -> hold (poll) while reconcile.inline
//                                            lasts, else wait 409 in_flight
//      retryable, attempts past the bound -> refuse tool_retry_exhausted
//      retryable, Retry-After past max_retry_after -> wait 429 retry_after with the
//                                            full time left (never held, never cut short)
//      retryable, Retry-After not over    -> hold(until) or wait 429 (retry.retry_after)
//      retryable                          -> dispatch(retry) with the same key
//      none, the run failed validation on two payloads -> refuse validation_repeated
//      none                               -> dispatch(new): reserve, then send
//   Every dispatch or reconcile first checks the run's budget -> refuse budget_exhausted.
//   A hold always ends in a new decision from a fresh read of the ledger.
#pragma once

#include "policy/reason.hpp"
#include "policy/tool.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace idemgate::policy {

using Clock = std::chrono::system_clock;

enum class IntentState {
  none,         // no entry for this (scope, tool, fingerprint) inside the window
  in_flight,    // reserved and being dispatched, on this or another replica
  completed,    // checked completion: the ledger holds the response to replay
  denied,       // a non-retryable answer (last_class says which)
  unknown,      // sent, no complete answer (or a 5xx on a key-less money write)
  retryable,    // rate_limited / transient, attempts below or at the bound
  unavailable,  // the ledger could not be read or written: fail closed
};

// The ledger's view of the intent with this fingerprint. From ledger::Intent:
//   reserved, dispatched -> in_flight; completed -> completed; denied -> denied;
//   unknown -> unknown; retryable -> retryable; no live row -> none; a ledger
//   error -> unavailable. last_class = parse_answer_class(intent.answer_class),
//   attempts, key, unknown_since and retry_not_before as stored; approved
//   when an operator approved the intent's escalation.
struct IntentView {
  IntentState state = IntentState::none;
  std::string key;                            // the key minted before the first dispatch
  AnswerClass last_class = AnswerClass::ok;   // denied / retryable / unknown: the class that put it there
  int attempts = 0;                           // dispatches so far (the first try counts)
  Clock::time_point unknown_since{};          // unknown: when the outcome became unknown
  std::optional<Clock::time_point> retry_not_before{};  // retryable: now + Retry-After when it came
  std::optional<Clock::time_point> lease_until{};       // in_flight: when the dispatching process's lease ends
  bool approved = false;                      // an operator approved this intent (pending_approval tools)
};

enum class RunState { active, frozen, killed };

struct RunView {
  RunState state = RunState::active;
  std::uint32_t calls_used = 0;  // matched calls before this one
  std::uint32_t budget = 200;    // runs.budget
};

// What the request says about its own key, and what the ledger knows of it.
struct AgentKeyFacts {
  bool present = false;                         // the agent sent the idempotency header
  bool bound_to_other_fingerprint = false;      // that key was first used with a different payload
  bool fingerprint_bound_to_other_key = false;  // this payload was first sent (in the window) with another key
};

// The result of a reconcile query (reconcile.mode query).
enum class QueryOutcome { found, not_found, failed };

struct DecisionInput {
  IntentView intent;
  RunView run;
  std::vector<std::string> missing_required;  // from missing_required(tool, body)
  AgentKeyFacts agent_key;
  Clock::time_point now{};
  // What a second caller of an in-flight intent is told to wait.
  Duration in_flight_retry_after = std::chrono::seconds(1);
  // What a refused ledger_unavailable tells the agent to wait.
  Duration ledger_retry_after = std::chrono::seconds(1);
  // What is left of reconcile.inline in this request: while it lasts an
  // unknown or in-flight intent is waited on here instead of answered.
  Duration inline_left = Duration::zero();
  // Reconciliation rounds (re-sends, lookups, polls) this request already
  // made, and when the last one ended: the next waits a backoff after it.
  int rounds = 0;
  std::optional<Clock::time_point> last_round_end{};
  // The lookup made in this request since the ledger was last read (query mode).
  std::optional<QueryOutcome> query{};
  // Intents of this run and tool that ended in validation, this one aside
  // (only gathered for a new intent of a run that failed validation before).
  int validation_failures = 0;
};

enum class VerdictKind {
  dispatch,   // send upstream (dispatch_kind, key)
  replay,     // answer with the stored response, Idempotent-Replayed: true
  reconcile,  // settle an unknown outcome first (reconcile_mode, key)
  hold,       // wait here until hold_until, then read the ledger and decide again
  wait,       // answer 409 / 429 with Retry-After: retry_after (wait_reason): retrying is safe
  refuse,     // problem+json: reason, http_status, terminal, retry_after if set
};

// Why the agent is told to come back (the wait answer's reason_code).
enum class WaitReason { in_flight, reconciling, retry_after };

enum class DispatchKind { new_intent, retry };

struct Verdict {
  VerdictKind kind = VerdictKind::refuse;
  DispatchKind dispatch_kind = DispatchKind::new_intent;
  // dispatch(retry), hold, reconcile: the key to send (the ledger's).
  // dispatch(new): empty means "mint one"; set means "send the agent's own
  // key" (present in the request; the caller binds it to the fingerprint).
  std::string key;
  ReconcileMode reconcile_mode = ReconcileMode::same_key;
  std::optional<Clock::time_point> hold_until;
  std::optional<Duration> retry_after;  // wait, refuse (retry_after_s)
  WaitReason wait_reason = WaitReason::in_flight;  // wait
  ReasonCode reason = ReasonCode::unclassified_fail_closed;  // refuse
  int http_status = 0;                  // refuse, wait
  Terminal terminal = Terminal::escalate;  // refuse
  std::string detail;                   // one sentence for the problem detail / log line
};

// `agent_key` is the value of the tool's idempotency header in the request
// (empty when absent); it is only read to fill Verdict::key on a new dispatch.
Verdict decide(const Tool& tool, const DecisionInput& input, std::string_view agent_key = {});

// How long to back off before reconciliation round `rounds` + 1 of one
// request: 250 ms, doubling, at most 2 s.
Duration reconcile_backoff(int rounds) noexcept;

std::string_view to_string(VerdictKind) noexcept;
std::string_view to_string(WaitReason) noexcept;

}  // namespace idemgate::policy
