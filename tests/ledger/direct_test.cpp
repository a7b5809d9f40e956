// A lone admission sent from the caller's thread (Ledger::admit with
// PostgreSQL's PgDirectAdmit): it gives what the workers' path gives, in
// every case the one statement may end in; a statement the server refused
// is written by the workers instead, once; and a connection the server ended
// is made again. One whose server went silent after it left is unknown.
#include "backend.hpp"

#include "ledger/pg_direct.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_future.hpp>

#include <libpq-fe.h>

#include <chrono>
#include <cstdlib>
#include <future>

#include <signal.h>

using idemgate::Task;

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;
using namespace std::chrono_literals;

namespace {

AdmitRequest admit_request(const std::string& fp, std::int64_t budget = 100, const std::string& run = "run-1") {
  return AdmitRequest{reserve_request(fp, "key-" + fp, run), budget, FirstAttempt{3, Millis(60000)}};
}

Result<Admission> admit(Ledger& ledger, AdmitRequest request) {
  auto call = [&]() -> Task<Result<Admission>> {
    RequestSnapshot snapshot;
    snapshot.method = "POST";
    snapshot.target = "/v1/charges";
    snapshot.body = "{\"amount\":100}";
    co_return co_await unboxed(ledger.admit(std::move(request), std::move(snapshot)));
  };
  return run(call());
}

std::uint64_t directs(const Ledger& ledger) { return ledger.stats().direct_admissions.load(); }

template <class Condition>
bool eventually(Condition condition) {
  for (auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(10ms))
    if (condition()) return true;
  return false;
}

// The direct connection is up and idle.
void wait_direct(Ledger& ledger) {
  auto* direct = dynamic_cast<PgDirectAdmit*>(ledger.direct());
  REQUIRE(direct != nullptr);
  REQUIRE_MESSAGE(eventually([&] { return direct->backend_pid() != 0; }), "no direct connection in 10 s");
}

std::string direct_backends(Backend& backend, const std::string& where = "") {
  return backend.query("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
                       "application_name = '" + std::string(PgDirectAdmit::application_name) + "'" + where);
}

// Ends the direct connection's session (as a restart or an admin would),
// and waits until its backend is gone (the connector may have made another
// by then).
void terminate_direct(Backend& backend, const std::string& where = "") {
  std::string const pid = backend.query("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND "
                                        "application_name = '" + std::string(PgDirectAdmit::application_name) + "'" +
                                        where);
  REQUIRE(!pid.empty());
  REQUIRE(pid.find('\n') == pid.size() - 1);  // exactly one
  std::string const id = pid.substr(0, pid.size() - 1);
  REQUIRE(backend.query("SELECT pg_terminate_backend(" + id + ")") == "t\n");
  REQUIRE(eventually([&] { return backend.query("SELECT count(*) FROM pg_stat_activity WHERE pid = " + id) == "0\n"; }));
}

// What an admission says, as text to compare.
std::string said(const Result<Admission>& a) {
  if (!a) return "error " + a.error().message();
  std::string out = "charge " + std::to_string(static_cast<int>(a->charge.outcome)) + " " +
                    std::to_string(a->charge.calls) + "/" + std::to_string(a->charge.budget);
  const auto& r = a->reservation;
  out += " reservation " + std::to_string(static_cast<int>(r.outcome)) + (r.started ? " started" : "") + " " +
         std::string(to_string(r.intent.state)) + " attempts " + std::to_string(r.intent.attempts) + " " +
         r.intent.fingerprint + " " + r.intent.key + " snapshot " + std::to_string(r.intent.request_snapshot.size());
  if (a->start)
    out += " start " + std::to_string(static_cast<int>(a->start->outcome)) + " " + std::to_string(a->start->attempt);
  return out;
}

// A transaction of its own holding run-1's row.
class RunLock {
 public:
  explicit RunLock(const std::string& url) : c_(PQconnectdb(url.c_str())) {
    REQUIRE(PQstatus(c_) == CONNECTION_OK);
    exec("BEGIN");
    exec("SELECT 1 FROM runs WHERE run_id = 'run-1' FOR UPDATE");
  }
  ~RunLock() { PQfinish(c_); }
  void release() { exec("ROLLBACK"); }

 private:
  void exec(const char* sql) {
    PGresult* r = PQexec(c_, sql);
    auto const status = PQresultStatus(r);
    PQclear(r);
    REQUIRE((status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK));
  }
  PGconn* c_;
};

}  // namespace

TEST_CASE("postgresql: a direct admission gives what the workers' admission gives" * doctest::test_suite("db")) {
  auto direct_db = postgresql_backend();
  auto queued_db = postgresql_backend();
  auto direct = open_ledger(*direct_db);
  auto queued = open_ledger(*queued_db);
  queued->admit_directly(nullptr);
  wait_direct(*direct);
  // Fresh; the same fingerprint again (a live intent holds it: the rest is
  // the batch's reservation, on a worker); fresh with the budget spent
  // (the charge refused: the rest reads the run); another run, without a
  // first attempt.
  std::vector<AdmitRequest> requests{admit_request("fp-1", 2), admit_request("fp-1", 2), admit_request("fp-2", 2),
                                     admit_request("fp-3", 10, "run-2")};
  requests[3].first_attempt.reset();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    CAPTURE(i);
    auto const before = directs(*direct);
    auto a = admit(*direct, requests[i]);
    auto b = admit(*queued, requests[i]);
    CHECK(said(a) == said(b));
    CHECK(a.has_value());
    CHECK(directs(*direct) == before + 1);
    wait_direct(*direct);  // given back before the result: idle again now
  }
  CHECK(directs(*queued) == 0);
  std::string const rows = "SELECT fingerprint, state, attempts, request_snapshot, redacted_request FROM intents ORDER BY id";
  CHECK(direct_db->query(rows) == queued_db->query(rows));
  CHECK(direct_db->query("SELECT intent_id, number, replica_id, state FROM attempts ORDER BY intent_id") ==
        queued_db->query("SELECT intent_id, number, replica_id, state FROM attempts ORDER BY intent_id"));
  std::string const runs = "SELECT run_id, calls, budget FROM runs ORDER BY run_id";
  CHECK(direct_db->query(runs) == queued_db->query(runs));
  CHECK(direct_db->query(runs) == "run-1|2|2\nrun-2|1|10\n");
}

TEST_CASE("postgresql: a direct admission the server refused is written by the workers, once" *
          doctest::test_suite("db")) {
  auto backend = postgresql_backend();
  auto ledger = open_ledger(*backend);
  wait_direct(*ledger);
  REQUIRE(admit(*ledger, admit_request("fp-0")).has_value());  // run-1 exists now
  REQUIRE(directs(*ledger) == 1);
  wait_direct(*ledger);

  RunLock lock(backend->config.url);
  auto pending = std::async(std::launch::async, [&] { return admit(*ledger, admit_request("fp-1")); });
  // The direct statement waits for the run's row; the server then ends its
  // session (as a restart or an admin would), and the statement rolls back.
  std::string const waiting = " AND wait_event_type = 'Lock'";
  REQUIRE(eventually([&] { return direct_backends(*backend, waiting) == "1\n"; }));
  terminate_direct(*backend, waiting);
  lock.release();
  auto admitted = pending.get();
  REQUIRE_MESSAGE(admitted.has_value(), admitted.error().message());
  CHECK(admitted->reservation.outcome == ReserveOutcome::reserved);
  CHECK(admitted->reservation.started);
  CHECK(admitted->charge.calls == 2);  // counted once, by the workers
  CHECK(directs(*ledger) == 1);
  CHECK(backend->query("SELECT calls FROM runs") == "2\n");
  CHECK(backend->query("SELECT fingerprint, state, attempts FROM intents ORDER BY id") ==
        "fp-0|dispatched|1\nfp-1|dispatched|1\n");
  CHECK(backend->query("SELECT count(*) FROM intents WHERE replica_id = 'replica-a'") == "2\n");
  CHECK(backend->query("SELECT count(*) FROM attempts") == "0\n");  // in flight on their intents

  // The connection is made again, and the next lone admission takes it.
  wait_direct(*ledger);
  REQUIRE(admit(*ledger, admit_request("fp-2")).has_value());
  CHECK(directs(*ledger) == 2);
}

TEST_CASE("postgresql: a direct admission's poll for its answer leaves its thread serving other work" *
          doctest::test_suite("db")) {
  auto backend = postgresql_backend();
  // A poll far longer than the test needs, and shorter than the direct
  // connection's lock_timeout (its statement_timeout, 5 s): a thread held by
  // the poll would serve nothing else until it ran out, and then still find
  // the statement waiting.
  auto const spin = std::chrono::seconds(3);
  backend->config.admit_spin = spin;
  auto ledger = open_ledger(*backend);
  wait_direct(*ledger);
  REQUIRE(admit(*ledger, admit_request("fp-0")).has_value());  // run-1 exists now; it was alone
  REQUIRE(directs(*ledger) == 1);
  wait_direct(*ledger);

  // The next lone admission polls (the last one was alone) for an answer
  // that waits for run-1's row. A coroutine on the same thread looks every
  // 10 ms, on a timer of that thread's event loop, and releases the row once
  // the statement waits for it: only a loop that runs between polls gets
  // there before the poll runs out.
  RunLock lock(backend->config.url);
  boost::asio::io_context io;
  auto const start = std::chrono::steady_clock::now();
  auto admitted = boost::asio::co_spawn(io, [&]() -> Task<Result<Admission>> {
    RequestSnapshot snapshot;
    snapshot.method = "POST";
    snapshot.target = "/v1/charges";
    co_return co_await unboxed(ledger->admit(admit_request("fp-1"), std::move(snapshot)));
  }, boost::asio::use_future);
  int looks = 0;
  bool waited = false;
  std::chrono::steady_clock::duration released_after{};
  boost::asio::co_spawn(io, [&]() -> Task<void> {
    std::string const waiting = " AND wait_event_type = 'Lock'";
    idemgate::SteadyTimer timer(co_await boost::asio::this_coro::executor);
    for (auto until = start + 10s; !waited && std::chrono::steady_clock::now() < until;) {
      timer.expires_after(10ms);
      co_await timer.async_wait(idemgate::use_task);
      ++looks;
      waited = direct_backends(*backend, waiting) == "1\n";
    }
    lock.release();  // either way, so that nothing is left waiting
    released_after = std::chrono::steady_clock::now() - start;
  }, boost::asio::detached);
  io.run();
  auto const elapsed = std::chrono::steady_clock::now() - start;
  REQUIRE_MESSAGE(waited, "the direct statement never waited for the run's row");
  auto result = admitted.get();
  REQUIRE_MESSAGE(result.has_value(), result.error().message());
  CHECK(result->reservation.outcome == ReserveOutcome::reserved);
  CHECK(directs(*ledger) == 2);
  CHECK(looks >= 1);
  CHECK_MESSAGE(released_after < spin, "the row was released only after the poll ran out");
  CHECK_MESSAGE(elapsed < spin, "the admission took as long as its poll: the thread served nothing else meanwhile");
  CHECK(backend->query("SELECT fingerprint, state FROM intents ORDER BY id") == "fp-0|dispatched\nfp-1|dispatched\n");
}

TEST_CASE("postgresql: a direct connection the server ended while idle sends nothing, and is made again" *
          doctest::test_suite("db")) {
  auto backend = postgresql_backend();
  auto ledger = open_ledger(*backend);
  wait_direct(*ledger);
  terminate_direct(*backend);
  // Found ended before anything was sent: the workers write it.
  auto first = admit(*ledger, admit_request("fp-1"));
  REQUIRE_MESSAGE(first.has_value(), first.error().message());
  CHECK(first->reservation.started);
  CHECK(directs(*ledger) == 0);
  wait_direct(*ledger);
  auto second = admit(*ledger, admit_request("fp-2"));
  REQUIRE_MESSAGE(second.has_value(), second.error().message());
  CHECK(directs(*ledger) == 1);
  CHECK(backend->query("SELECT calls FROM runs") == "2\n");
}

TEST_CASE("postgresql: a direct admission whose server went silent after it left is unknown, never resent" *
          doctest::test_suite("db")) {
  // It signals the server's process: only with the cluster scripts/pg runs
  // on this machine (scripts/test sets IDEMGATE_TEST_PGCTL for it).
  const char* local = std::getenv("IDEMGATE_TEST_PGCTL");
  if (!local || !*local) return;
  auto backend = postgresql_backend();
  backend->config.statement_timeout = 300ms;  // the client's deadline: 2.3 s
  auto ledger = open_ledger(*backend);
  wait_direct(*ledger);
  int const pid = dynamic_cast<PgDirectAdmit*>(ledger->direct())->backend_pid();
  // The server process stops (as a frozen host would) with the statement
  // in its socket: it may yet commit it.
  REQUIRE(::kill(pid, SIGSTOP) == 0);
  auto silent = admit(*ledger, admit_request("fp-1"));
  REQUIRE(::kill(pid, SIGCONT) == 0);
  REQUIRE_FALSE(silent.has_value());
  CHECK(silent.error() == errc::unavailable);  // not "nothing was written"
  CHECK(directs(*ledger) == 0);
  CHECK(ledger->stats().errors.load() == 1);
  // The connection is made again; the retry finds whatever did commit.
  wait_direct(*ledger);
  CHECK(dynamic_cast<PgDirectAdmit*>(ledger->direct())->backend_pid() != pid);
  auto retry = admit(*ledger, admit_request("fp-1"));
  REQUIRE_MESSAGE(retry.has_value(), retry.error().message());
  CHECK(backend->query("SELECT attempts || ' ' || state FROM intents WHERE fingerprint = 'fp-1'") ==
        "1 dispatched\n");
  CHECK(backend->query("SELECT count(*) FROM attempts") == "0\n");  // in flight on its intent
}

TEST_CASE("postgresql: a direct admission whose commit failed after its row is unknown, never queued" *
          doctest::test_suite("db")) {
  auto backend = postgresql_backend();
  auto ledger = open_ledger(*backend);
  // The row comes back, then the commit (at the Sync) fails.
  backend->query("CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS "
                 "$$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$");
  backend->query("CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON intents DEFERRABLE INITIALLY DEFERRED "
                 "FOR EACH ROW EXECUTE FUNCTION refuse_commit()");
  wait_direct(*ledger);
  auto refused = admit(*ledger, admit_request("fp-1"));
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error() == errc::unavailable);  // neither queued nor "nothing written"
  CHECK(directs(*ledger) == 0);
  CHECK(backend->query("SELECT count(*) FROM intents") == "0\n");
  CHECK(backend->query("SELECT count(*) FROM runs") == "0\n");
  // The workers were never asked: one admission, one call.
  CHECK(ledger->stats().calls.load() == 1);
  CHECK(ledger->stats().batches.load() == 0);
}

TEST_CASE("sqlite: admissions have no direct way") {
  auto backend = sqlite_backend();
  auto ledger = open_ledger(*backend);
  CHECK(ledger->direct() == nullptr);
  REQUIRE(admit(*ledger, admit_request("fp-1")).has_value());
  CHECK(directs(*ledger) == 0);
}
