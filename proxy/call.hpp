// One request matched to a tool, as the enforcement path sees it: what the
// request is (read-only after intake) and what the answer will report. Every
// file of the path (intake, write_path, read_path, query_reconcile, answers)
// works on one Call; none keeps state of its own.
#pragma once

#include "config/config.hpp"
#include "ledger/types.hpp"
#include "policy/decide.hpp"
#include "policy/fingerprint.hpp"
#include "policy/mcp.hpp"
#include "policy/tool.hpp"
#include "proxy/body_budget.hpp"
#include "proxy/http_rules.hpp"
#include "proxy/stream.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace idemgate::ledger {
class Ledger;
}

namespace idemgate::proxy {

class Worker;

using RequestParser = boost::beast::http::request_parser<boost::beast::http::buffer_body>;

struct Call {
  Call(ProxyStream& client, boost::beast::flat_buffer& client_buffer, RequestParser& parser, const Target& target,
       const policy::Tool& tool, const config::Config& cfg, Worker& worker);

  // The request.
  ProxyStream& client;
  boost::beast::flat_buffer& client_buffer;
  RequestParser& parser;
  boost::beast::http::request<boost::beast::http::buffer_body>& req;
  const Target& target;
  const policy::Tool& tool;
  const config::Config& cfg;
  Worker& worker;
  ledger::Ledger& ledger;
  bool const is_write;
  unsigned const version;
  std::chrono::steady_clock::time_point const start = std::chrono::steady_clock::now();
  std::string body;
  std::string run;
  std::string trace_id;
  std::string agent_key;  // the tool's idempotency header as the agent sent it ("" when absent)
  policy::Fingerprint fp;
  std::vector<std::string> missing;  // required fields absent from the body
  bool malformed = false;
  bool keep_alive = false;
  // An MCP tools/call: answered in JSON-RPC terms, with the requester's id.
  bool is_mcp = false;
  policy::McpRequest mcp;
  // Its share of limits.guarded_budget, held for as long as the call: the
  // request body, and the answer buffer, which starts as a small slice and
  // grows as an answer (or a lookup's) fills it.
  std::optional<BodyBudget::Reservation> body_budget;
  std::optional<BodyBudget::Reservation> answer_budget;

  // What the ledger holds for it (writes), and what this request did.
  std::optional<ledger::Intent> intent;
  bool sent = false;  // an attempt began in this request: never answer "nothing was sent"
  int attempt = 0;    // the attempt this request dispatched (0: none)
  std::int64_t calls_used = 0;

  // What the answer reports (Idemgate-* headers, the decision log line).
  std::string decision = "forwarded";
  std::string answer_class;  // "" until known; "pending" is written where no provider answer exists
  std::string reason_code;
  bool answer_cut_by_budget = false;  // an answer was buffered short because the budget was full
};

// The run's charge for this call, as decide() reads it.
void apply_charge(Call& call, const ledger::RunCharge& charge, policy::DecisionInput& in);

}  // namespace idemgate::proxy
