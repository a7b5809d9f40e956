// reconcile.mode query: asking the provider whether an attempt whose outcome
// is unknown landed, with the tool's reconcile.query.
#pragma once

#include "policy/decide.hpp"
#include "proxy/call.hpp"

#include <boost/asio/awaitable.hpp>

#include <string>

namespace idemgate::proxy {

struct QueryResult {
  policy::QueryOutcome outcome = policy::QueryOutcome::failed;
  std::string found_json;  // found: the value at reconcile.query.found (or the whole answer)
};

boost::asio::awaitable<QueryResult> ask_provider(Call& call);

}  // namespace idemgate::proxy
