// A buffered request/answer exchange with an upstream, for guarded calls:
// the whole (inspected) request goes out, the whole answer comes back, and
// the transport outcome says whether the request may have left.
#pragma once

#include "config/config.hpp"
#include "policy/classify.hpp"
#include "proxy/http_rules.hpp"
#include "proxy/problem.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <optional>

namespace idemgate::proxy {

class Worker;

using StringRequest = boost::beast::http::request<boost::beast::http::string_body>;
using StringResponse = boost::beast::http::response<boost::beast::http::string_body>;

struct UpstreamAnswer {
  policy::TransportOutcome outcome = policy::TransportOutcome::connect_failed;
  StringResponse response;        // when outcome == answered
  std::optional<Problem> problem;  // otherwise: what went wrong, for the agent
  bool reused_connection = false;
};

// Sends req (already in origin-form with Host set) to target and reads the
// complete answer, bounded by the config's deadlines and by
// response_limit bytes of body.
boost::asio::awaitable<UpstreamAnswer> exchange(const Target& target, StringRequest& req, const config::Config& cfg,
                                                Worker& worker, std::uint64_t response_limit);

}  // namespace idemgate::proxy
