// Names of the ledger's states: the strings stored in the database and shown
// to operators.
#include "ledger/types.hpp"

#include <array>

namespace idemgate::ledger {
namespace {

template <class Enum, std::size_t N>
std::optional<Enum> parse(std::string_view text,
                          const std::array<std::string_view, N>& names) noexcept {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == text) return static_cast<Enum>(i);
  return std::nullopt;
}

constexpr std::array<std::string_view, 6> intent_names{
    "reserved", "dispatched", "completed", "unknown", "denied", "retryable"};
constexpr std::array<std::string_view, 3> attempt_names{"dispatched", "answered", "unknown"};
constexpr std::array<std::string_view, 3> run_names{"active", "frozen", "killed"};
constexpr std::array<std::string_view, 4> escalation_names{"open", "approved", "denied",
                                                           "completed"};

}  // namespace

std::string_view to_string(IntentState s) noexcept { return intent_names[static_cast<int>(s)]; }
std::string_view to_string(AttemptState s) noexcept { return attempt_names[static_cast<int>(s)]; }
std::string_view to_string(RunState s) noexcept { return run_names[static_cast<int>(s)]; }
std::string_view to_string(EscalationState s) noexcept {
  return escalation_names[static_cast<int>(s)];
}

std::optional<IntentState> parse_intent_state(std::string_view t) noexcept {
  return parse<IntentState>(t, intent_names);
}
std::optional<AttemptState> parse_attempt_state(std::string_view t) noexcept {
  return parse<AttemptState>(t, attempt_names);
}
std::optional<RunState> parse_run_state(std::string_view t) noexcept {
  return parse<RunState>(t, run_names);
}
std::optional<EscalationState> parse_escalation_state(std::string_view t) noexcept {
  return parse<EscalationState>(t, escalation_names);
}

std::optional<Admission> whole_admission(AdmitFirst& first) {
  if (!first.counted || !first.inserted) return std::nullopt;
  Admission admission;
  admission.charge = *first.counted;
  bool const started = first.inserted->state == IntentState::dispatched;
  admission.reservation = Reservation{ReserveOutcome::reserved, std::move(*first.inserted), started};
  if (started) admission.start = FirstStart{AttemptOutcome::started, 1};
  return admission;
}

}  // namespace idemgate::ledger
