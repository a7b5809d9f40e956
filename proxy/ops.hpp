// The operator's operations on the ledger, shared by the CLI
// (`idemgate escalations|intents|runs ...`) and the admin API: one
// implementation, two front ends. Each takes already-parsed arguments and
// answers with a JSON value, or an error naming an HTTP status and a
// reason_code the front end shows (problem+json, or a line on stderr).
#pragma once

#include "ledger/types.hpp"
#include "ledger/executor.hpp"

#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace idemgate::ledger {
class Ledger;
}

namespace idemgate::proxy::ops {

struct OpResult {
  unsigned status = 200;
  boost::json::value body;  // on success: an object, or an array of objects
  std::string reason_code;  // on failure: not_found, illegal_transition, invalid_argument, ledger_unavailable
  std::string detail;
  bool ok() const noexcept { return status < 400; }
};

boost::json::object to_json(const ledger::Intent&);
boost::json::object to_json(const ledger::Escalation&);
boost::json::object to_json(const ledger::Run&);

// state: "" (all), open, approved, denied, completed, or resolved (any but open).
Task<OpResult> list_escalations(ledger::Ledger&, std::string state, int limit);
Task<OpResult> show_escalation(ledger::Ledger&, std::int64_t id);
// action: approve (a pending-approval intent may dispatch once), deny
// (refused for good), complete (needs the receipt; the intent replays it).
Task<OpResult> resolve_escalation(ledger::Ledger&, std::int64_t id, std::string action,
                                                    std::string receipt, std::string note);
Task<OpResult> show_intent(ledger::Ledger&, std::int64_t id);
Task<OpResult> find_intent_by_key(ledger::Ledger&, std::string key);
Task<OpResult> list_intents(ledger::Ledger&, std::string run, int limit);
// action: show, kill, unfreeze.
Task<OpResult> run_action(ledger::Ledger&, std::string run, std::string action,
                                            std::string reason);

std::optional<std::int64_t> parse_id(std::string_view);

}  // namespace idemgate::proxy::ops
