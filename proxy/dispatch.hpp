// Sending a guarded call upstream once and classifying what came back.
#pragma once

#include "policy/classify.hpp"
#include "proxy/call.hpp"
#include "proxy/exchange.hpp"
#include "ledger/executor.hpp"

#include <chrono>
#include <string_view>

namespace idemgate::proxy {

struct Sent {
  UpstreamAnswer answer;
  policy::Classification cls;
  bool egress_refused = false;  // the egress guard refused the address: nothing left the process
  std::chrono::system_clock::time_point at;
};

// key: the idempotency key to send (writes), "" for reads.
Task<Sent> send_upstream(Call& call, std::string_view key);

// How long the process that dispatches owns the attempt: every phase of the
// exchange (connect, write, response) plus the time to record the outcome.
std::chrono::milliseconds attempt_lease(const config::Config& cfg);

}  // namespace idemgate::proxy
