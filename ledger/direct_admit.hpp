// A lone admission's one statement sent from the awaiting coroutine's own
// thread, instead of through a ledger worker (see Ledger::admit): at low load
// a guarded write's way in is then one round trip with the database and no
// hand-off between threads, each of which costs a wake-up of the other
// thread (on a virtual machine, of its idle CPU: tens of microseconds).
#pragma once

#include "ledger/errc.hpp"
#include "ledger/types.hpp"
#include "ledger/executor.hpp"

#include <optional>

namespace idemgate::ledger {

class DirectAdmit {
 public:
  virtual ~DirectAdmit() = default;
  // Whether `request` may go this way at all (Store::admit_alone's one
  // statement does the whole of it, or what it did is finished by
  // Store::finish_admission).
  virtual bool takes(const AdmitRequest& request) const = 0;
  // Sends the statement and awaits its row, on the caller's executor (the
  // awaiting coroutine's thread does the waiting, through its reactor).
  // spin: the thread may poll for the row for a moment before it waits in
  // its event loop (an implementation's own bound), its other work served
  // between polls: for when it has nothing else to serve.
  // nullopt: nothing was written (no connection yet, the server ended it,
  // a deadlock it rolled back): the caller queues the admission instead.
  // An error is the admission's: errc::unavailable when the connection was
  // lost after the statement left (its fate is unknown: the caller fails
  // closed, and its retry finds whatever did get committed), busy when the
  // server cancelled it (statement or lock timeout), storage_failure.
  virtual Task<std::optional<Result<AdmitFirst>>> send(const AdmitRequest& request,
                                                                         bool spin) = 0;
};

}  // namespace idemgate::ledger
