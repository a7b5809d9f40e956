// A buffered request/answer exchange with an upstream, for guarded calls:
// the whole (inspected) request goes out, the answer comes back into one
// buffer of at most ExchangeOptions::answer_limit body bytes, and no more
// than the call's answer_budget can grow to (the rest, if any, is streamed
// on to the client by write_answer), and the transport outcome says whether
// the request may have left.
#pragma once

#include "config/config.hpp"
#include "policy/classify.hpp"
#include "proxy/answer_head.hpp"
#include "proxy/body_budget.hpp"
#include "proxy/http_rules.hpp"
#include "proxy/problem.hpp"
#include "proxy/stream.hpp"
#include "proxy/upstream_pool.hpp"
#include "ledger/executor.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <memory>
#include <optional>

namespace idemgate::proxy {

class Worker;

using StringRequest = boost::beast::http::request<boost::beast::http::string_body>;
using StringResponse = boost::beast::http::response<boost::beast::http::string_body>;

// A request as exchange() sends it: its header rendered (request line,
// fields, blank line) and its body, which must outlive the exchange.
struct UpstreamRequest {
  boost::beast::http::verb method = boost::beast::http::verb::get;  // a HEAD's answer has no body
  std::string head;
  std::string_view body;
};

// The unread rest of an answer larger than the buffer, with its connection.
struct AnswerTail;

struct ExchangeOptions {
  std::uint64_t answer_limit = 1024 * 1024;  // body bytes buffered (limits.guarded_answer)
  // The call's share of limits.guarded_budget for its answer buffer: grown
  // before each piece is buffered; when it cannot grow the buffer stops
  // there, as if answer_limit had been reached. Null: not counted (the
  // sweeper's lookups, one at a time, and forward_buffered, as before).
  BodyBudget::Reservation* answer_budget = nullptr;
  // Past answer_limit: keep the rest in UpstreamAnswer::tail for
  // write_answer (else the exchange fails: a lookup needs the whole answer).
  bool stream_rest = true;
  Reuse reuse = Reuse::any;
  // A reused connection that failed before any byte of the answer (the
  // upstream closed it as the request went out): send once more on a fresh
  // connection. Only where a duplicate cannot do harm: reads, and writes
  // whose provider deduplicates on the key.
  bool resend_if_stale = false;
};

struct UpstreamAnswer {
  policy::TransportOutcome outcome = policy::TransportOutcome::connect_failed;
  // When outcome == answered: the status, headers and the first body bytes
  // (all of them unless tail is set).
  StringResponse response;
  std::shared_ptr<AnswerTail> tail;  // set when the body is longer than the buffer
  bool cut_by_budget = false;        // the buffer stopped short of answer_limit: answer_budget could not grow
  std::optional<Problem> problem;    // otherwise: what went wrong, for the agent
  bool reused_connection = false;
  bool resent = false;  // the first send met a stale connection and was sent again
};

// Sends req (in origin-form with Host and its length set) to target and
// reads the answer, bounded by the config's deadlines.
Task<UpstreamAnswer> exchange(const Target& target, const UpstreamRequest& req,
                                                const config::Config& cfg, Worker& worker,
                                                const ExchangeOptions& options);

// Writes `head` (as to_client left it, for a client that keeps the
// connection when keep_alive is set) and `body` to the client, then the rest
// of the upstream body when tail is set (body is then its first bytes; the
// framing is the upstream's length, or chunked). Returns whether the client
// connection can carry another request.
Task<bool> write_answer(ProxyStream& client, const AnswerHead& head, std::string_view body,
                                          bool keep_alive, AnswerTail* tail, const config::Config& cfg,
                                          Worker& worker);

}  // namespace idemgate::proxy
