// The read path: reads are sent freely (nothing to reserve) but counted
// against the run's budget, and the same failing read is still bounded and
// honours the Retry-After it got (ReadTracker, this process's memory).
#pragma once

#include "proxy/call.hpp"
#include "proxy/forward.hpp"
#include "ledger/executor.hpp"

namespace idemgate::proxy {

Task<ForwardResult> run_read_path(Call& call);

}  // namespace idemgate::proxy
