// PostgreSQL's lease sweep and the first attempts that live on their
// intents (schema version 10): the horizon it reads under the lease lock,
// an answer landing while it recovers, the order it locks intents in, and
// the server's clock going back.
#include "pg_sessions.hpp"

#include <string>
#include <thread>
#include <vector>

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

// The lease sweep reads the time it may reach (its horizon) with the lease
// lock held exclusively; an admission holds it shared until it commits. So
// a first attempt whose admission is still open (its row not visible yet,
// its lease perhaps over already) is never passed over: the sweep waits for
// the lock, and after lock_timeout leaves its horizon where it was. Once
// the admission commits, the next sweep recovers the attempt. Without the
// lock on either side the first sweep would move its horizon past that
// lease, and no later sweep would look at it again.
TEST_CASE("postgresql: the lease sweep never passes a first attempt whose admission is still open" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  auto stores = sessions(*backend);
  auto& sweeper = *stores.at(0);
  auto& admitter = *stores.at(1);
  std::int64_t id = 0;
  HeldBatch admitting(admitter, [&] {
    auto request = reserve_request("fp-open", "key-fp-open");
    request.start = ReserveRequest::Start{Millis(0), "replica-a"};  // over once committed
    auto r = admitter.reserve_intents({&request, 1}).front();
    if (r && r->started) id = r->intent.id;
  });
  auto const swept = sweeper.recover_expired();
  auto const horizon = backend->query("SELECT horizon FROM lease_sweep");
  admitting.release();
  REQUIRE(id > 0);
  REQUIRE_MESSAGE(swept.has_value(), swept.error().message());
  CHECK(*swept == 0);
  CHECK(horizon == "-infinity\n");
  CHECK(sweeper.horizon_misses() == 1);  // said (idemgate_lease_sweep_horizon_misses_total)
  auto const again = sweeper.recover_expired();
  REQUIRE_MESSAGE(again.has_value(), again.error().message());
  CHECK(*again == 1);
  CHECK(sweeper.horizon_misses() == 1);
  CHECK(sweeper.find_intent(id)->state == IntentState::unknown);
  CHECK(backend->query("SELECT number || ' ' || replica_id || ' ' || state || ' ' || recovered FROM attempts "
                       "WHERE intent_id = " + std::to_string(id)) == "1 replica-a unknown true\n");
  CHECK(backend->query("SELECT horizon > now() - interval '1 minute' FROM lease_sweep") == "t\n");
}

// An answer that lands while the lease sweep is turning its attempt unknown
// (the attempt's lease over, its answer late) still settles it, as it would
// an attempt recovered earlier: the sweep holds the intent locked with the
// attempt's row written, the outcome's statement waits for the intent and,
// once the sweep has committed, finds the row its snapshot did not show.
// Here the sweep is held mid-way by a second expired attempt whose own
// answer is in a transaction kept open.
TEST_CASE("postgresql: an answer landing while the lease sweep recovers its attempt still settles it" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  auto stores = sessions(*backend, 3);
  auto& sweeper = *stores.at(0);
  auto& holder = *stores.at(1);
  auto& recorder = *stores.at(2);
  // x: a first attempt begun with its reservation; y: one begun apart. Both
  // leases are over at once.
  auto x = reserve_started(recorder, "fp-x", Millis(0));
  REQUIRE(x.started);
  auto const y = begin_apart(recorder, "fp-y");
  // y's answer, its transaction open: the sweep waits for y, with x locked
  // and its row written...
  HeldBatch holding(holder, [&] { (void)holder.record_outcome(completed(y, 1)); });
  Result<int> swept = 0;
  std::thread sweeping([&] { swept = sweeper.recover_expired(); });
  auto const sweep_waits = lock_waits(*backend, "1\n");
  // ...and x's answer waits for the sweep.
  Result<Intent> answered = errc::storage_failure;
  std::thread answering([&] { answered = recorder.record_outcome(completed(x.intent.id, 1)); });
  auto const both_wait = lock_waits(*backend, "2\n");
  holding.release();
  sweeping.join();
  answering.join();
  CHECK(sweep_waits == "1\n");
  CHECK(both_wait == "2\n");
  REQUIRE_MESSAGE(swept.has_value(), swept.error().message());
  CHECK(*swept == 1);
  REQUIRE_MESSAGE(answered.has_value(), answered.error().message());
  CHECK(answered->state == IntentState::completed);
  CHECK(backend->query("SELECT number || ' ' || state || ' ' || answer_class || ' ' || recovered FROM attempts "
                       "WHERE intent_id = " + std::to_string(x.intent.id)) == "1 answered ok true\n");
}

// The lease sweep locks every intent it will recover in id order before it
// writes anything, as a round of outcomes does: the first attempts it finds
// by their lease and the intents of the attempts begun apart alike. Seen
// from outside: with a lower intent held by another transaction (its late
// answer), the sweep waits there holding nothing above it, where locking
// its first attempts first would hold one that a round settling both could
// be waiting for.
TEST_CASE("postgresql: the lease sweep locks what it recovers in id order, as outcomes do" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  auto stores = sessions(*backend, 3);
  auto& sweeper = *stores.at(0);
  auto& holder = *stores.at(1);
  auto& store = *stores.at(2);
  // a: an attempt begun apart; b, above it: a first attempt begun with its
  // reservation. Both leases are over at once.
  auto const a = begin_apart(store, "fp-a");
  auto b = reserve_started(store, "fp-b", Millis(0));
  REQUIRE(b.started);
  REQUIRE(a < b.intent.id);
  HeldBatch holding(holder, [&] { (void)holder.record_outcome(completed(a, 1)); });
  Result<int> swept = 0;
  std::thread sweeping([&] { swept = sweeper.recover_expired(); });
  auto const waiting = lock_waits(*backend, "1\n");
  auto const free_ids = free_intents(*backend);
  holding.release();
  sweeping.join();
  CHECK(waiting == "1\n");
  CHECK(free_ids == std::to_string(b.intent.id) + "\n");
  REQUIRE_MESSAGE(swept.has_value(), swept.error().message());
  CHECK(*swept == 1);
  CHECK(sweeper.find_intent(a)->state == IntentState::completed);
  CHECK(sweeper.find_intent(b.intent.id)->state == IntentState::unknown);
}

// The server's clock gone back behind the stored horizon (a step back, a
// standby whose clock is behind): the leases set since may end before the
// horizon, and the sweep still finds them. Seen here as a horizon an hour
// ahead of the clock: a process that swept before looks back from its new
// horizon as far as the time since its last sweep, one that never swept
// looks at every lease; then the horizon follows the clock back.
TEST_CASE("postgresql: the lease sweep finds first attempts after the server's clock went back" *
          doctest::test_suite("db")) {
  auto backend = idemgate::ledger::test::postgresql_backend();
  auto stores = sessions(*backend);
  auto& swept_before = *stores.at(0);
  auto& fresh = *stores.at(1);
  auto dispatch = [&](const std::string& fp) {
    auto r = reserve_started(swept_before, fp, Millis(0));
    REQUIRE(r.started);
    return r.intent.id;
  };
  REQUIRE(swept_before.recover_expired().has_value());
  // With the horizon an hour ahead, an attempt dispatched now is found by
  // `sweeper`'s next sweep, which moves the horizon back to the clock.
  auto const found_after_going_back = [&](Store& sweeper, const std::string& fp) {
    backend->query("UPDATE lease_sweep SET horizon = now() + interval '1 hour'");
    auto const id = dispatch(fp);
    auto const swept = sweeper.recover_expired();
    REQUIRE_MESSAGE(swept.has_value(), swept.error().message());
    CHECK(*swept == 1);
    CHECK(sweeper.find_intent(id)->state == IntentState::unknown);
    CHECK(backend->query("SELECT horizon < now() + interval '1 minute' FROM lease_sweep") == "t\n");
  };
  found_after_going_back(swept_before, "fp-back-1");
  found_after_going_back(fresh, "fp-back-2");
  CHECK(backend->query("SELECT count(*) FROM attempts WHERE state = 'unknown' AND recovered") == "2\n");
}
