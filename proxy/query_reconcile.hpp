// reconcile.mode query: asking the provider whether an attempt whose outcome
// is unknown landed, with the tool's reconcile.query. Two askers share it:
// the agent's own request (inline reconciliation, with the agent's
// credentials where policy::may_forward_credentials allows) and the
// escalation sweeper (in the background, from the ledger's row alone).
#pragma once

#include "ledger/types.hpp"
#include "policy/decide.hpp"
#include "proxy/body_budget.hpp"
#include "proxy/call.hpp"
#include "ledger/executor.hpp"

#include <boost/beast/http/fields.hpp>
#include <boost/json/value.hpp>

#include <string>
#include <string_view>

namespace idemgate::proxy {

struct QueryResult {
  policy::QueryOutcome outcome = policy::QueryOutcome::failed;
  std::string found_json;  // found: the value at reconcile.query.found (or the whole answer)
};

// What one lookup is made from.
struct Lookup {
  const policy::Tool& tool;
  std::string_view key;                          // {key}
  std::string_view receipt;                      // {receipt}
  const boost::json::value* body = nullptr;      // {/json/pointer}: the write's request body
  // The agent's request, whose Authorization / X-Api-Key go along when the
  // query URL is the tool's own host over HTTPS; null: no credentials.
  const boost::beast::http::fields* agent = nullptr;
  std::string_view agent_host;                   // the host the agent's write went to
  // The asking call's answer budget, which the lookup's answer buffer grows
  // (it is gone before the call buffers its own answer); null: not counted.
  BodyBudget::Reservation* answer_budget = nullptr;
};

// Asks the provider (on worker's thread, with the config's deadlines).
// failed: no URL (a placeholder without a value, or one the ledger only holds
// redacted), no answer, or an answer that says neither found nor not found.
Task<QueryResult> ask_provider(const Lookup& lookup, const config::Config& cfg, Worker& worker);

// The agent's request asking about its own intent.
Task<QueryResult> ask_provider(Call& call);

// The settlement of a lookup that found the write: completed with the
// receipt, the found JSON stored as the answer to replay.
ledger::Outcome found_outcome(const policy::Tool& tool, std::int64_t intent_id, const std::string& found_json);

}  // namespace idemgate::proxy
