// The write path of SPEC section 2, one loop:
//   gather inputs -> decide -> begin attempt (expected state) -> send ->
//   classify -> record -> answer
// A verdict that sends runs once per turn; a hold waits and turns again
// from a fresh read of the ledger; the loop ends at the first answer.
#pragma once

#include "proxy/call.hpp"
#include "proxy/forward.hpp"
#include "ledger/executor.hpp"

namespace idemgate::proxy {

Task<ForwardResult> run_write_path(Call& call);

}  // namespace idemgate::proxy
