// The settlement rules of outcome.hpp.
#include "policy/outcome.hpp"

namespace idemgate::policy {

namespace {

SettledState state_of(AnswerClass c) noexcept {
  switch (c) {
    case AnswerClass::ok: return SettledState::completed;
    case AnswerClass::rate_limited:
    case AnswerClass::transient: return SettledState::retryable;
    case AnswerClass::unknown: return SettledState::unknown;
    default: return SettledState::denied;
  }
}

}  // namespace

Settlement settle_attempt(AnswerClass raw, const AttemptFacts& facts) noexcept {
  Settlement s{raw, state_of(raw), false};
  if (facts.reconciling && s.state == SettledState::retryable) {
    // "Not now" (or nothing sent at all) says nothing about the first send.
    s.answer_class = AnswerClass::unknown;
    s.state = SettledState::unknown;
    s.waive = true;
    return s;
  }
  if (!facts.answered) return s;
  const bool refusal = s.state == SettledState::denied;
  if (facts.reconciling && refusal) {
    s.answer_class = AnswerClass::unknown;
    s.state = SettledState::unknown;
    s.waive = raw == AnswerClass::conflict;
    return s;
  }
  if (facts.attempt > 1 && (raw == AnswerClass::conflict || raw == AnswerClass::validation)) {
    s.answer_class = AnswerClass::unknown;
    s.state = SettledState::unknown;
  }
  return s;
}

std::string_view to_string(SettledState s) noexcept {
  switch (s) {
    case SettledState::completed: return "completed";
    case SettledState::retryable: return "retryable";
    case SettledState::unknown: return "unknown";
    case SettledState::denied: return "denied";
  }
  return "?";
}

}  // namespace idemgate::policy
