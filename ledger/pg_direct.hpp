// DirectAdmit for PostgreSQL: one libpq connection of its own, in
// non-blocking mode, on which the caller's coroutine sends admit_alone's
// statement and awaits its row through its own reactor. One admission at a
// time uses it (the Ledger gives it the admissions' writer lane while it is
// in flight); with the connection in use, not connected yet, or lost, the
// admission is queued for the workers as before. While the statement is on
// its way the caller's thread first polls for the answer, for up to `spin`
// (ledger.admit_spin), serving its other connections between polls, and
// then waits in its event loop.
//
// A thread of its own connects (and sets the session up, and prepares the
// statement), bounded by the URL's connect_timeout, at start and again after
// the connection was lost, with the workers' backoff; the destructor
// interrupts it at any step.
#pragma once

#include "ledger/direct_admit.hpp"
#include "ledger/executor.hpp"

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

namespace idemgate::ledger {

class PgDirectAdmit final : public DirectAdmit {
 public:
  // spin: how long the caller's thread polls for the answer before it
  // waits in its event loop, when send is asked to.
  PgDirectAdmit(std::string url, Millis statement_timeout, std::chrono::microseconds spin = {});
  ~PgDirectAdmit() override;
  PgDirectAdmit(const PgDirectAdmit&) = delete;
  PgDirectAdmit& operator=(const PgDirectAdmit&) = delete;

  bool takes(const AdmitRequest& request) const override;
  Task<std::optional<Result<AdmitFirst>>> send(const AdmitRequest& request,
                                                                 bool spin) override;

  // Its application_name, unless the URL sets one.
  static constexpr std::string_view application_name = "idemgate-direct-admit";

  // The connection's backend process id while it is idle, else 0 (tests).
  int backend_pid();

 private:
  struct Connection;  // the PGconn, finished with its last owner
  // The connection's state, shared with each admission in flight: a frame
  // destroyed after this object (its io_context dropped after the Ledger,
  // at shutdown) still finds it.
  struct State;
  void connect_loop();
  std::shared_ptr<Connection> open_connection();

  std::string url_;
  Millis statement_timeout_;
  std::chrono::microseconds spin_;
  std::shared_ptr<State> state_;
  int stop_fd_ = -1;  // eventfd: readable once stopping (interrupts a connect)
  std::thread connector_;
};

}  // namespace idemgate::ledger
