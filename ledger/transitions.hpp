// The legal intent state transitions, in one place, rendered as the SQL
// `state IN (...)` guards both backends put in their UPDATE statements, so a
// transition that is not listed here cannot happen whatever the caller does.
#pragma once

#include "ledger/types.hpp"

#include <string>
#include <vector>

namespace idemgate::ledger {

// States an intent may be in for begin_attempt to dispatch it.
const std::vector<IntentState>& dispatchable_states();

// States an intent may be in for an Outcome to settle it: with an attempt,
// only `dispatched`; without one (attempt == 0) it depends on the target.
// Empty when the target can never be reached that way.
std::vector<IntentState> settle_sources(IntentState target, bool with_attempt);

// States an escalation resolution may settle an intent from.
std::vector<IntentState> resolution_sources(Resolution);

// "state IN ('a','b')" ("1=0" when empty). Only enum names are inlined.
std::string sql_state_guard(const std::vector<IntentState>& states,
                            const std::string& column = "state");

}  // namespace idemgate::ledger
