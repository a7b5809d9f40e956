// The intent state machine's edges (see IntentState in types.hpp).
#include "ledger/transitions.hpp"

namespace idemgate::ledger {

const std::vector<IntentState>& dispatchable_states() {
  static const std::vector<IntentState> states{IntentState::reserved, IntentState::retryable,
                                               IntentState::unknown};
  return states;
}

std::vector<IntentState> settle_sources(IntentState target, bool with_attempt) {
  using S = IntentState;
  if (with_attempt) {
    switch (target) {
      case S::completed:
      case S::denied:
      case S::retryable:
      case S::unknown: return {S::dispatched, S::unknown};  // late answer: see types.hpp
      default: return {};
    }
  }
  switch (target) {
    case S::denied: return {S::reserved, S::retryable};  // refused before a dispatch
    case S::completed: return {S::unknown};               // reconciled by a query
    default: return {};
  }
}

std::vector<IntentState> resolution_sources(Resolution r) {
  using S = IntentState;
  switch (r) {
    case Resolution::complete: return {S::unknown, S::retryable, S::reserved};
    case Resolution::deny: return {S::unknown, S::retryable, S::reserved};
    case Resolution::approve: return {};
  }
  return {};
}

std::string sql_state_guard(const std::vector<IntentState>& states, const std::string& column) {
  if (states.empty()) return "1=0";
  std::string sql = column + " IN (";
  for (std::size_t i = 0; i < states.size(); ++i) {
    if (i) sql += ',';
    sql += '\'';
    sql += to_string(states[i]);
    sql += '\'';
  }
  return sql + ')';
}

}  // namespace idemgate::ledger
