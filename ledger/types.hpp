// The ledger's rows and requests as plain data: what the Store backends read
// and write and what the enforcement layer gets back. No behaviour here
// besides the names of the states.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace idemgate::ledger {

class Ledger;  // Outcome::redacted_by

using Clock = std::chrono::system_clock;
using TimePoint = std::chrono::time_point<Clock, std::chrono::milliseconds>;
using Millis = std::chrono::milliseconds;
using Headers = std::vector<std::pair<std::string, std::string>>;

// Where an intent stands. Legal moves (enforced by the SQL of both backends):
//   reserved   -> dispatched (begin_attempt) | denied (refused before dispatch)
//   dispatched -> completed | denied | retryable | unknown (the attempt's outcome)
//   retryable  -> dispatched | denied
//   unknown    -> dispatched (reconcile by re-sending the same key)
//              | completed | denied | retryable | unknown (the late answer of
//                the attempt whose lease ran out, while no other began)
//              | completed (reconciled by query, or a human with a receipt)
//              | denied (a human decided)
//   completed, denied: terminal.
enum class IntentState { reserved, dispatched, completed, unknown, denied, retryable };

// One dispatch of an intent. `unknown` attempts were sent and never answered
// (timeout, reset, or the process died while they were in flight).
enum class AttemptState { dispatched, answered, unknown };

enum class RunState { active, frozen, killed };

enum class EscalationState { open, approved, denied, completed };
enum class Resolution { approve, deny, complete };

std::string_view to_string(IntentState) noexcept;
std::string_view to_string(AttemptState) noexcept;
std::string_view to_string(RunState) noexcept;
std::string_view to_string(EscalationState) noexcept;
std::optional<IntentState> parse_intent_state(std::string_view) noexcept;
std::optional<AttemptState> parse_attempt_state(std::string_view) noexcept;
std::optional<RunState> parse_run_state(std::string_view) noexcept;
std::optional<EscalationState> parse_escalation_state(std::string_view) noexcept;

// What is replayed for a completed intent. Already redacted and capped.
struct StoredResponse {
  int status = 0;
  Headers headers;
  std::string body;
  bool truncated = false;  // body was cut at ledger.response_cap
};

struct Intent {
  std::int64_t id = 0;
  std::string run;
  std::string tool;
  std::string scope;        // the run id for scope: run, "" for scope: global
  std::string fingerprint;
  std::string key;          // the idempotency key sent upstream, never changes
  IntentState state = IntentState::reserved;
  std::string answer_class; // policy::AnswerClass name of the last answer; "" before one
  int attempts = 0;         // attempts begun so far (attempt numbers are 1..attempts)
  int waived = 0;           // of those, answered "key in use" while reconciling: not counted against the bound
  std::optional<int> status;
  std::string receipt;      // the provider's id for the effect, "" when none
  std::optional<StoredResponse> response;
  std::string request_snapshot;  // redacted request, for escalation packages
  Millis window{0};
  Millis unknown_ttl{0};
  bool recovered = false;   // became unknown by crash recovery
  TimePoint created_at;
  TimePoint updated_at;
  TimePoint window_until;
  std::optional<TimePoint> unknown_since;
  std::optional<TimePoint> retry_not_before;
  // dispatched: until when the process that began the attempt owns it (its
  // own connect + response deadlines and the time to record the outcome).
  std::optional<TimePoint> lease_until;
  // query-mode unknowns: when the escalation sweeper claimed its one
  // background lookup (Store::claim_lookups); nullopt: not yet.
  std::optional<TimePoint> looked_up_at;

  // Attempts that count against retry.bound.
  int attempts_spent() const noexcept { return attempts - waived; }
};

// The escalation sweeper's background lookup of a query-mode tool's unknowns:
// due once an intent of `tool` has been unknown for `after`.
struct LookupDue {
  std::string tool;
  Millis after{0};
};

struct ReserveRequest {
  std::string run;
  std::string tool;
  std::string scope;
  std::string fingerprint;
  std::string key;        // freshly minted (or the agent's, in passthrough mode)
  std::string agent_key;  // the key the agent sent, "" when none
  Millis window{std::chrono::hours(24)};
  Millis unknown_ttl{std::chrono::minutes(15)};
  std::string request_snapshot;  // redacted by the Ledger before it is stored
  // Set: a fresh reservation is stored with its first attempt begun (attempt
  // 1, dispatched, owned by `replica` until now + lease), what begin_attempt
  // would do next, in the same statement. An existing intent is left as is.
  struct Start {
    Millis lease{0};
    std::string replica;
  };
  std::optional<Start> start;
};

enum class ReserveOutcome {
  reserved,     // this caller won: the row holds its key
  existing,     // a live intent for scope+fingerprint already existed
  key_mismatch  // agent_key is bound to another fingerprint (422); intent is that one
};

struct Reservation {
  ReserveOutcome outcome = ReserveOutcome::reserved;
  Intent intent;
  bool started = false;  // reserved with request.start: attempt 1 began
};

enum class AttemptOutcome {
  started,    // this caller may dispatch attempt `attempt` now
  changed,    // the intent is no longer in the state the verdict was made from: decide again
  in_flight,  // another attempt is dispatched (any replica): 409 Retry-After
  completed,  // replay intent.response
  denied,     // refuse, never re-send
  exhausted,  // attempts reached max_attempts
  not_yet     // retryable but intent.retry_not_before is in the future
};

// begin_attempt's compare-and-set: the state and attempt count the verdict
// was made from, and how long this process owns the attempt it begins.
struct AttemptRequest {
  std::int64_t intent_id = 0;
  IntentState expected_state = IntentState::reserved;
  int expected_attempts = 0;
  int max_attempts = 1;  // the tool's bound + 1, counted in attempts_spent()
  Millis lease{0};
};

struct AttemptStart {
  AttemptOutcome outcome = AttemptOutcome::started;
  int attempt = 0;  // the attempt number when started
  Intent intent;
};

// The result of one attempt (attempt > 0), or a settlement without one
// (attempt == 0: refused before dispatch, or reconciled by a query).
struct Outcome {
  std::int64_t intent_id = 0;
  int attempt = 0;
  IntentState state = IntentState::completed;  // completed|denied|retryable|unknown
  std::string answer_class;
  std::optional<int> status;
  std::string receipt;
  std::optional<StoredResponse> response;
  std::optional<Millis> retry_after;  // retryable: earliest next attempt
  // The provider said "this key is in use" to a re-send while reconciling:
  // the attempt does not count against the bound.
  bool waive = false;
  // The agent has the provider's answer already and the ledger holds the
  // attempt under a lease: were this record lost, the lease turns the
  // attempt unknown and it is reconciled before any re-send. Its commit may
  // return before the disk has it (Store::Durability::deferred).
  bool after_answer = false;
  // The Ledger whose redact() this response went through already (its
  // rules and cap), if any: that ledger's record_outcome does not redact it
  // again; any other ledger does (a marker cannot carry another ledger's
  // rules, or none, past this one's).
  const Ledger* redacted_by = nullptr;
};

enum class CallKind { read, write };
enum class ChargeOutcome { counted, exhausted, frozen, killed };

struct RunCharge {
  ChargeOutcome outcome = ChargeOutcome::counted;
  std::int64_t calls = 0;
  std::int64_t budget = 0;
};

// One run charge of a batch (Store::count_calls).
struct ChargeRequest {
  std::string run;
  std::int64_t budget = 0;
  CallKind kind = CallKind::write;
};

// A guarded write's way in (Ledger::admit): the run charge, the reservation
// and, when first_attempt is set, the reservation is this request's own and
// the charge counted, the first attempt's start, all in one transaction:
// the one durable commit a write needs before it is sent.
struct FirstAttempt {
  int max_attempts = 1;
  Millis lease{0};
  std::string replica{};  // filled by Ledger::admit
};

struct AdmitRequest {
  ReserveRequest reserve;
  std::int64_t budget = 0;
  std::optional<FirstAttempt> first_attempt;
};

// An admission's first attempt, when it was tried: whether it began, and
// its number. The intent as it left it is the Admission's reservation's.
struct FirstStart {
  AttemptOutcome outcome = AttemptOutcome::started;
  int attempt = 0;
};

struct Admission {
  RunCharge charge;
  // Its intent is the one Intent an admission carries (a write's path moves
  // it a dozen times): as the first attempt left it, when one was tried.
  Reservation reservation;
  // Set when the first attempt was tried (a fresh reservation, a counted
  // charge and first_attempt asked for); its outcome is started unless the
  // intent could not be begun after all.
  std::optional<FirstStart> start;
};

// What a lone admission's one statement (Store::admit_alone) did: the
// charge when it counted, the intent when it was inserted (begun when the
// charge counted and a first attempt was asked for).
struct AdmitFirst {
  std::optional<RunCharge> counted;
  std::optional<Intent> inserted;
};

// The Admission when the statement did all of it (counted and inserted);
// nullopt when Store::finish_admission has the rest to do.
std::optional<Admission> whole_admission(AdmitFirst& first);

struct Run {
  std::string id;
  RunState state = RunState::active;
  std::int64_t calls = 0;
  std::int64_t budget = 0;
  std::string reason;
};

struct EscalationRequest {
  std::string run;
  std::optional<std::int64_t> intent_id;
  std::string reason_code;
  std::string package_json;  // the problem+json package, redacted by the caller's policy layer
};

struct Escalation {
  std::int64_t id = 0;
  std::string run;
  std::optional<std::int64_t> intent_id;
  std::string reason_code;
  std::string package_json;
  EscalationState state = EscalationState::open;
  std::string receipt;
  std::string note;
  // completed by "operator", or by "idemgate" when reconciliation settled the
  // intent; "" while open.
  std::string resolved_by;
  TimePoint created_at;
  std::optional<TimePoint> resolved_at;
};

struct ResolveRequest {
  std::int64_t escalation_id = 0;
  Resolution resolution = Resolution::approve;
  std::string receipt;  // complete: the provider's id for the effect
  std::string note;
};

// The production signals of the dash_* views (SPEC section 6), read for the
// operator page's dashboard and for /metrics. Hours are UTC,
// "YYYY-MM-DDTHH:00:00Z" on both backends.
struct ReasonCount {
  std::string reason_code;
  std::int64_t count = 0;
};

struct HourlyEscalations {
  std::string hour;
  std::string reason_code;
  std::int64_t escalations = 0;
};

struct RetryDepth {
  std::string tool;
  int depth = 0;
  std::int64_t intents = 0;
};

struct HourlyRefusals {
  std::string hour;
  std::string tool;
  std::string reason_code;
  std::int64_t refusals = 0;
  std::int64_t fingerprints = 0;
};

struct Signals {
  std::vector<ReasonCount> open_escalations;            // by reason_code
  std::vector<HourlyEscalations> escalations_by_hour;   // since `since`, oldest first
  std::vector<RetryDepth> retry_depth;                  // by tool, then depth
  std::vector<HourlyRefusals> refusals_by_hour;         // since `since`, oldest first
  std::int64_t unknown_past_ttl = 0;
  std::int64_t duplicate_receipts = 0;                  // local keys with >1 provider receipt
};

}  // namespace idemgate::ledger
