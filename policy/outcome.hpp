// What an attempt's answer means for its intent: the class recorded, the
// state the intent moves to, and whether the attempt counts against the
// bound. Pure: the write path calls settle_attempt() once per answer.
//
//   ok                                   -> completed
//   rate_limited, transient              -> retryable (the provider said "not now")
//   unknown (sent, no complete answer)   -> unknown
//   a re-send of an unknown's key (reconciling):
//     rate_limited, transient, or not sent at all (connect failed)
//                                        -> unknown, waived: "not now" settles nothing
//     conflict (409: "key in use", the first attempt still runs at the
//     provider)                          -> unknown, waived (not counted)
//     any other refusal                  -> unknown: it says nothing about the first send
//   a retry (attempt > 1) answered conflict or validation -> unknown, for the
//     same reason ("this key is in use" / "this key came with another body")
//   anything else                        -> denied
#pragma once

#include "policy/tool.hpp"

namespace idemgate::policy {

enum class SettledState { completed, retryable, unknown, denied };

struct AttemptFacts {
  int attempt = 1;           // this attempt's number (the first try is 1)
  bool reconciling = false;  // it re-sent the key of an attempt whose outcome was unknown
  bool answered = true;      // a complete answer came back
};

struct Settlement {
  AnswerClass answer_class = AnswerClass::unknown;  // what is recorded (may differ from the raw class)
  SettledState state = SettledState::unknown;
  bool waive = false;  // does not count against retry.bound
};

Settlement settle_attempt(AnswerClass raw, const AttemptFacts& facts) noexcept;

std::string_view to_string(SettledState) noexcept;

}  // namespace idemgate::policy
