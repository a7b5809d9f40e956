// Crash recovery: a child process holding dispatched attempts is SIGKILLed;
// reopening the ledger turns exactly the attempts whose lease has passed
// unknown (recovered), never a live one, whoever began it; recover_expired
// takes the rest over once their lease runs out. And PostgreSQL
// restarted under a live Ledger: errors come back as results and the pool
// reconnects by itself.
#include "backend.hpp"

#include "ledger/open_store.hpp"
#include "ledger/executor.hpp"

#include <csignal>
#include <cstdlib>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using idemgate::Task;

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;
using namespace std::chrono_literals;

namespace {

// Runs in the child: dispatches attempts through a plain Store (three whose
// lease has already run out, one still live for a minute and one for 300 ms,
// each begun apart; then two begun with their reservations, which live on
// their intents: one run out, one live for a minute), reports the intent
// ids on `out`, then waits to be killed.
[[noreturn]] void hold_dispatched(const idemgate::config::Ledger& config, int out) {
  auto stores = open_stores(config);
  if (!stores) _exit(2);
  auto& store = *stores->front();
  std::string ids;
  auto dispatch = [&](const std::string& fp, const std::string& replica, Millis lease) {
    auto request = reserve_request(fp, "key-" + fp);
    auto reserved = store.reserve_intents({&request, 1}).front();
    if (!reserved) _exit(3);
    AttemptRequest attempt{reserved->intent.id, IntentState::reserved, 0, 3, lease};
    auto started = store.begin_attempt(attempt, replica);
    if (!started || started->outcome != AttemptOutcome::started) _exit(4);
    ids += std::to_string(reserved->intent.id) + " ";
  };
  for (int i = 0; i < 3; ++i) dispatch("fp-crash-" + std::to_string(i), "replica-child", Millis(-1));
  dispatch("fp-crash-live", "replica-child", std::chrono::minutes(1));
  dispatch("fp-crash-short", "replica-other", Millis(300));
  auto with_reservation = [&](const std::string& fp, Millis lease) {
    auto request = reserve_request(fp, "key-" + fp);
    request.start = ReserveRequest::Start{lease, "replica-child"};
    auto reserved = store.reserve_intents({&request, 1}).front();
    if (!reserved || !reserved->started) _exit(6);
    ids += std::to_string(reserved->intent.id) + " ";
  };
  with_reservation("fp-crash-first", Millis(-1));
  with_reservation("fp-crash-first-live", std::chrono::minutes(1));
  ids += "\n";
  if (write(out, ids.data(), ids.size()) != static_cast<ssize_t>(ids.size())) _exit(5);
  for (;;) pause();
}

}  // namespace

LEDGER_CONFORMANCE(crash_recovery, "dispatched attempts become unknown once their lease has passed, never before") {
  REQUIRE(migrate(backend.config).has_value());
  // A completed intent of the same replica must stay completed.
  std::int64_t completed_id = 0;
  {
    auto ledger = open_ledger(backend, "replica-child");
    auto reserved = run(ledger->reserve_intent(reserve_request("fp-done", "key-done"), {}));
    REQUIRE(reserved.has_value());
    completed_id = reserved->intent.id;
    REQUIRE(run(ledger->begin_attempt(attempt_now(*ledger, completed_id))).has_value());
    Outcome done;
    done.intent_id = completed_id;
    done.attempt = 1;
    done.answer_class = "ok";
    REQUIRE(run(ledger->record_outcome(done)).has_value());
  }

  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    hold_dispatched(backend.config, fds[1]);
  }
  close(fds[1]);
  std::string line;
  char c;
  while (read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  close(fds[0]);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE_MESSAGE(!line.empty(), "the child failed before dispatching: status " << status);
  std::vector<std::int64_t> ids;
  std::istringstream in(line);
  for (std::int64_t id; in >> id;) ids.push_back(id);
  REQUIRE(ids.size() == 7);

  // Reopened under the same replica id (IDEMGATE_REPLICA_ID shared by an old
  // and a new process): the id gives no right to another process's attempt.
  auto ledger = open_ledger(backend, "replica-child");
  for (int i = 0; i < 3; ++i) {
    auto intent = run(ledger->find_intent(ids[i]));
    REQUIRE(intent.has_value());
    CHECK(intent->state == IntentState::unknown);
    CHECK(intent->recovered);
    CHECK(intent->unknown_since.has_value());
  }
  // Live leases are left alone, whichever replica began them...
  auto live = run(ledger->find_intent(ids[3]));
  CHECK(live->state == IntentState::dispatched);
  CHECK(live->lease_until.has_value());
  CHECK(run(ledger->find_intent(completed_id))->state == IntentState::completed);
  // A first attempt begun with its reservation is recovered the same way,
  // and its attempts row written then; a live one is left on its intent.
  auto first = run(ledger->find_intent(ids[5]));
  CHECK(first->state == IntentState::unknown);
  CHECK(first->recovered);
  CHECK(backend.query("SELECT number || ' ' || replica_id || ' ' || state FROM attempts WHERE recovered "
                      "AND intent_id = " + std::to_string(ids[5])) == "1 replica-child unknown\n");
  CHECK(run(ledger->find_intent(ids[6]))->state == IntentState::dispatched);
  CHECK(backend.query("SELECT count(*) FROM attempts WHERE intent_id = " + std::to_string(ids[6])) == "0\n");
  // ...until the lease has run out (polled with a deadline, never a fixed sleep).
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (run(ledger->find_intent(ids[4]))->state == IntentState::dispatched) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, "a 300 ms lease never expired");
    auto recovered = run(ledger->recover_expired());
    REQUIRE(recovered.has_value());
    CHECK(*recovered <= 1);
  }
  CHECK(run(ledger->find_intent(ids[4]))->state == IntentState::unknown);
  CHECK(run(ledger->find_intent(ids[3]))->state == IntentState::dispatched);
  CHECK(backend.query("SELECT count(*) FROM attempts WHERE state = 'unknown' AND recovered") == "5\n");
  // The unknown rows are reconciled under their original key.
  auto again = run(ledger->begin_attempt(attempt_now(*ledger, ids[0])));
  REQUIRE(again.has_value());
  CHECK(again->outcome == AttemptOutcome::started);
  CHECK(again->intent.key == "key-fp-crash-0");
}

TEST_CASE("postgresql-serial: PostgreSQL restarted and stopped under a live Ledger" *
          doctest::test_suite("db")) {
  auto backend = postgresql_backend();
  const char* pgctl_env = std::getenv("IDEMGATE_TEST_PGCTL");
  REQUIRE_MESSAGE(pgctl_env != nullptr, "IDEMGATE_TEST_PGCTL is not set: run through scripts/test");
  std::string pgctl = pgctl_env;
  auto ledger = open_ledger(*backend);
  auto reserved = run(ledger->reserve_intent(reserve_request("fp-before", "key-before"), {}));
  REQUIRE(reserved.has_value());
  auto id = reserved->intent.id;

  // Sends calls until 16 in a row succeed; returns how many failed, each of
  // which must be a result (unavailable), never a hang or an exception.
  auto until_recovered = [&] {
    int errors = 0, consecutive_ok = 0;
    auto until = std::chrono::steady_clock::now() + 60s;
    while (consecutive_ok < 16) {
      REQUIRE_MESSAGE(std::chrono::steady_clock::now() < until, "the pool did not recover");
      std::vector<Task<Result<Intent>>> ops;
      for (int i = 0; i < 8; ++i) ops.push_back(ledger->find_intent(id));
      for (const auto& r : run_all(std::move(ops), 2)) {
        if (r.has_value()) {
          CHECK(r->key == "key-before");
          ++consecutive_ok;
        } else {
          CHECK(r.error() == errc::unavailable);
          ++errors;
          consecutive_ok = 0;
        }
      }
    }
    return errors;
  };

  // Restarted: every pooled connection died with the server; the pool
  // reconnects without a new Ledger.
  REQUIRE(std::system((pgctl + " restart -m fast >/dev/null").c_str()) == 0);
  until_recovered();

  // Stopped: calls fail at once with unavailable, including a reservation
  // (the proxy answers 503 and sends nothing); started again: recovered.
  struct Restart {
    std::string pgctl;
    bool stopped = false;
    ~Restart() {
      if (stopped) std::system((pgctl + " start >/dev/null").c_str());
    }
  } guard{pgctl};
  REQUIRE(std::system((pgctl + " stop -m fast >/dev/null").c_str()) == 0);
  guard.stopped = true;
  auto refused = run(ledger->reserve_intent(reserve_request("fp-down", "key-down"), {}));
  CHECK(refused.error() == errc::unavailable);
  CHECK(run(ledger->find_intent(id)).error() == errc::unavailable);
  REQUIRE(std::system((pgctl + " start >/dev/null").c_str()) == 0);
  guard.stopped = false;
  until_recovered();

  auto after = run(ledger->reserve_intent(reserve_request("fp-after", "key-after"), {}));
  REQUIRE(after.has_value());
  CHECK(after->outcome == ReserveOutcome::reserved);
  // Nothing was reserved while the database was down.
  CHECK(backend->query("SELECT count(*) FROM intents WHERE fingerprint = 'fp-down'") == "0\n");
}
