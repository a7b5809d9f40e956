// The Ledger facade without a database: a full queue answers busy at once
// (while the worker is still stuck), calls waiting together are committed in
// one Store::batch() (group commit; reservations in one Store call), in lock
// order, a batch that fails fails every call in it, one worker at a time
// writes, and an admission is one transaction in three steps.
#include "gated_ledger.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/this_coro.hpp>

using idemgate::Task;
using idemgate::use_task;
using idemgate::SteadyTimer;

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;
using namespace std::chrono_literals;

TEST_CASE("unit: a full queue answers busy at once, without waiting for the worker") {
  LedgerOptions options;
  options.queue_limit = 2;
  GatedLedger gated(options);
  auto& gate = *gated.gate;
  auto& ledger = gated.ledger;
  {
    Loop loop;
    auto running = loop.spawn(ledger->find_intent(1));
    REQUIRE(gate.wait_entered(1));
    auto queued_1 = loop.spawn(ledger->find_intent(2));
    auto queued_2 = loop.spawn(ledger->find_intent(3));
    REQUIRE(wait_until([&] { return ledger->queued() == 2; }));

    auto refused = loop.spawn(ledger->find_intent(4));
    REQUIRE(refused.wait_for(deadline) == std::future_status::ready);
    CHECK(refused.get().error() == errc::queue_full);
    CHECK(running.wait_for(0s) == std::future_status::timeout);  // the worker is still stuck
    CHECK(ledger->stats().busy_rejections == 1);

    gate.release();
    CHECK(running.get().error() == errc::not_found);
    CHECK(queued_1.get().error() == errc::not_found);
    CHECK(queued_2.get().error() == errc::not_found);
  }
}

TEST_CASE("unit: reservations waiting together share one transaction") {
  GatedLedger gated;
  auto& gate = *gated.gate;
  auto& ledger = gated.ledger;
  Loop loop;
  auto first = loop.spawn(ledger->reserve_intent(reserve_request("fp-0", "k-0"), {}));
  REQUIRE(gate.wait_entered(1));
  std::vector<std::future<Result<Reservation>>> waiting;
  for (int i = 1; i <= 10; ++i)
    waiting.push_back(loop.spawn(ledger->reserve_intent(
        reserve_request("fp-" + std::to_string(i), "k-" + std::to_string(i)), {})));
  auto lookup = loop.spawn(ledger->find_intent(7));  // not a reservation: same transaction
  REQUIRE(wait_until([&] { return ledger->queued() == 11; }));
  gate.release();
  CHECK(first.get()->intent.key == "k-0");
  for (int i = 1; i <= 10; ++i) CHECK(waiting[i - 1].get()->intent.key == "k-" + std::to_string(i));
  CHECK(lookup.get().error() == errc::not_found);
  CHECK(gate.batches() == std::vector<std::size_t>{1, 10});
  CHECK(ledger->stats().reserve_batches == 2);
  CHECK(ledger->stats().reservations == 11);
  CHECK(ledger->stats().batches == 2);
  CHECK(ledger->stats().batched_jobs == 12);
}

TEST_CASE("unit: calls of every kind waiting together share one transaction, in lock order") {
  GatedLedger gated;
  auto& gate = *gated.gate;
  auto& ledger = gated.ledger;
  Loop loop;
  auto running = loop.spawn(ledger->find_intent(1));
  REQUIRE(gate.wait_entered(1));
  Outcome settle;
  settle.intent_id = 9;
  settle.attempt = 1;
  Outcome illegal;  // the fake refuses an outcome without an attempt
  illegal.intent_id = 3;
  auto lookup = loop.spawn(ledger->find_intent(2));
  auto outcome_9 = loop.spawn(ledger->record_outcome(settle));
  auto begin_5 = loop.spawn(ledger->begin_attempt(AttemptRequest{5, IntentState::reserved, 0, 3, Millis(1000)}));
  auto charge_b = loop.spawn(ledger->count_call("run-b", 10, CallKind::write));
  auto reserve_1 = loop.spawn(ledger->reserve_intent(reserve_request("fp-1", "k-1"), {}));
  auto outcome_3 = loop.spawn(ledger->record_outcome(illegal));
  auto charge_a = loop.spawn(ledger->count_call("run-a", 10, CallKind::write));
  auto reserve_2 = loop.spawn(ledger->reserve_intent(reserve_request("fp-2", "k-2"), {}));
  REQUIRE(wait_until([&] { return ledger->queued() == 8; }));
  gate.release();
  CHECK(running.get().error() == errc::not_found);
  CHECK(lookup.get().error() == errc::not_found);
  CHECK(outcome_9.get().has_value());
  CHECK(begin_5.get().has_value());
  CHECK(charge_b.get().has_value());
  CHECK(reserve_1.get()->intent.key == "k-1");
  CHECK(outcome_3.get().error() == errc::illegal_transition);  // only this call failed
  CHECK(charge_a.get().has_value());
  CHECK(reserve_2.get()->intent.key == "k-2");

  // The first call ran alone (no batch); the eight waiting ran in one batch:
  // runs by id, the reservations as one statement, the outcomes as one (by
  // intent id), the other calls on intents by id, the calls that lock nothing.
  auto transactions = gate.transactions();
  REQUIRE(transactions.size() == 1);
  CHECK(transactions[0] ==
        std::vector<std::string>{"count_call run-a", "count_call run-b", "reserve_intents",
                                 "record_outcome 3", "record_outcome 9", "begin_attempt 5", "find_intent"});
  CHECK(gate.batches() == std::vector<std::size_t>{2});
  CHECK(ledger->stats().batches == 2);
  CHECK(ledger->stats().batched_jobs == 9);
  CHECK(ledger->stats().reserve_batches == 1);
}

TEST_CASE("unit: a batch whose transaction fails fails every call in it") {
  GatedLedger gated;
  auto& gate = *gated.gate;
  auto& ledger = gated.ledger;
  Loop loop;
  auto running = loop.spawn(ledger->find_intent(1));
  REQUIRE(gate.wait_entered(1));
  gate.fail_batches(errc::unavailable);
  Outcome settle;
  settle.intent_id = 9;
  settle.attempt = 1;
  auto outcome = loop.spawn(ledger->record_outcome(settle));
  auto charge = loop.spawn(ledger->count_call("run-a", 10, CallKind::write));
  auto reserve = loop.spawn(ledger->reserve_intent(reserve_request("fp-1", "k-1"), {}));
  REQUIRE(wait_until([&] { return ledger->queued() == 3; }));
  gate.release();
  CHECK(running.get().error() == errc::not_found);
  // Each call's own result was fine, but nothing of the batch is known
  // written: every caller gets the batch's error.
  CHECK(outcome.get().error() == errc::unavailable);
  CHECK(charge.get().error() == errc::unavailable);
  CHECK(reserve.get().error() == errc::unavailable);
  CHECK(ledger->stats().batches == 1);  // the lone first call only
  CHECK(ledger->stats().batched_jobs == 1);
  CHECK(ledger->stats().reservations == 0);
}

TEST_CASE("unit: calls queued when the Ledger stops complete with shutting_down") {
  GatedLedger gated;
  auto& gate = *gated.gate;
  auto& ledger = gated.ledger;
  Loop loop;
  auto running = loop.spawn(ledger->find_intent(1));
  REQUIRE(gate.wait_entered(1));
  auto queued = loop.spawn(ledger->find_intent(2));
  REQUIRE(wait_until([&] { return ledger->queued() == 1; }));
  std::thread stopper([&] { ledger.reset(); });
  CHECK(queued.get().error() == errc::shutting_down);
  gate.release();
  stopper.join();
  CHECK(running.get().error() == errc::not_found);
}

TEST_CASE("unit: one writer: locking calls wait for its commit and go together, lookups are served meanwhile") {
  std::vector<std::unique_ptr<Store>> stores;
  std::vector<GatedStore*> gates;
  for (int i = 0; i < 2; ++i) {
    auto store = std::make_unique<GatedStore>();
    gates.push_back(store.get());
    stores.push_back(std::move(store));
  }
  auto ledger = std::make_unique<Ledger>(std::move(stores), LedgerOptions{});
  {
    Loop loop;
    auto first = loop.spawn(ledger->reserve_intent(reserve_request("fp-0", "k-0"), {}));
    // The first reservation makes one worker the writer; it is held in its store.
    REQUIRE(wait_until([&] { return gates[0]->entered() + gates[1]->entered() == 1; }));
    auto* writer = gates[0]->entered() ? gates[0] : gates[1];
    auto* other = writer == gates[0] ? gates[1] : gates[0];
    other->release();
    std::vector<std::future<Result<Reservation>>> waiting;
    for (int i = 1; i <= 3; ++i)
      waiting.push_back(loop.spawn(ledger->reserve_intent(reserve_request("fp-" + std::to_string(i), "k-" + std::to_string(i)), {})));
    auto charge = loop.spawn(ledger->count_call("run-a", 10, CallKind::read));
    auto lookup = loop.spawn(ledger->find_intent(2));
    // The other worker serves the lookup; the locking calls wait for the writer.
    REQUIRE(lookup.wait_for(deadline) == std::future_status::ready);
    CHECK(lookup.get().error() == errc::not_found);
    REQUIRE(wait_until([&] { return ledger->queued() == 4; }));
    CHECK(other->batches().empty());
    writer->release();
    CHECK(first.get()->intent.key == "k-0");
    for (int i = 1; i <= 3; ++i) CHECK(waiting[i - 1].get()->intent.key == "k-" + std::to_string(i));
    CHECK(charge.get().has_value());
    // Everything that queued during the first commit went in the next one.
    auto sizes = writer->batches();
    for (auto s : other->batches()) sizes.push_back(s);
    CHECK(sizes == std::vector<std::size_t>{1, 3});
    CHECK(ledger->stats().batches == 3);  // the first reservation, the lookup, the rest
  }
}

TEST_CASE("unit: an admission whose reservation did not begin its attempt carries the intent begin_attempts gave") {
  GatedLedger gated;
  auto& gate = *gated.gate;
  auto& ledger = gated.ledger;
  gate.begin_apart();
  gate.release();
  Loop loop;
  AdmitRequest admit{reserve_request("fp-1", "k-1", "run-b"), 10, FirstAttempt{3, Millis(1000)}};
  auto a = loop.spawn(unboxed(ledger->admit(admit, {}))).get();
  REQUIRE(a.has_value());
  CHECK(a->charge.outcome == ChargeOutcome::counted);
  REQUIRE(a->start.has_value());
  CHECK(a->start->outcome == AttemptOutcome::started);
  CHECK(a->start->attempt == 1);
  // The one intent the admission carries is begin_attempt's, not the
  // reservation's row as it was before the attempt began.
  CHECK(a->reservation.intent.key == "begun-0");
  CHECK(a->reservation.intent.state == IntentState::dispatched);
  CHECK(a->reservation.intent.attempts == 1);
  auto transactions = gate.transactions();
  REQUIRE(transactions.size() == 1);
  CHECK(transactions[0] ==
        std::vector<std::string>{"count_call run-b", "reserve_intents start replica", "begin_attempt 0"});
}

TEST_CASE("unit: an admission runs its charge first, then its reservation, which begins the attempt when counted") {
  GatedLedger gated;
  auto& gate = *gated.gate;
  auto& ledger = gated.ledger;
  Loop loop;
  auto running = loop.spawn(ledger->find_intent(1));
  REQUIRE(gate.wait_entered(1));
  AdmitRequest admit{reserve_request("fp-1", "k-1", "run-b"), 10, FirstAttempt{3, Millis(1000)}};
  auto admitted = loop.spawn(unboxed(ledger->admit(admit, {})));
  Outcome settle;
  settle.intent_id = 9;
  settle.attempt = 1;
  auto outcome_9 = loop.spawn(ledger->record_outcome(settle));
  auto charge_a = loop.spawn(ledger->count_call("run-a", 10, CallKind::read));
  REQUIRE(wait_until([&] { return ledger->queued() == 3; }));
  gate.release();
  CHECK(running.get().error() == errc::not_found);
  auto a = admitted.get();
  REQUIRE(a.has_value());
  CHECK(a->reservation.intent.key == "k-1");
  CHECK(a->charge.outcome == ChargeOutcome::counted);
  REQUIRE(a->start.has_value());
  CHECK(a->start->outcome == AttemptOutcome::started);
  CHECK(a->start->attempt == 1);
  CHECK(a->reservation.intent.state == IntentState::dispatched);
  CHECK(outcome_9.get().has_value());
  CHECK(charge_a.get().has_value());
  auto transactions = gate.transactions();
  REQUIRE(transactions.size() == 1);
  // The runs (by id), then the reservation carrying the first attempt (no
  // begin_attempt after it), then the outcome.
  CHECK(transactions[0] == std::vector<std::string>{"count_call run-a", "count_call run-b",
                                                    "reserve_intents start replica", "record_outcome 9"});

  // Alone, an admission still is one transaction.
  AdmitRequest alone{reserve_request("fp-2", "k-2", "run-b"), 10, FirstAttempt{3, Millis(1000)}};
  auto single = loop.spawn(unboxed(ledger->admit(alone, {})));
  REQUIRE(single.get().has_value());
  CHECK(gate.transactions().size() == 2);
}

namespace {

// A DirectAdmit that holds each send until the test lets it end (then it
// answers busy: written or not does not matter here), recording whether
// the ledger let it poll for its answer.
class HeldDirect final : public DirectAdmit {
 public:
  bool takes(const AdmitRequest&) const override { return true; }
  Task<std::optional<Result<AdmitFirst>>> send(const AdmitRequest&, bool spin) override {
    std::size_t number = 0;
    {
      std::lock_guard lock(mutex_);
      spins_.push_back(spin);
      number = spins_.size();
    }
    SteadyTimer wait(co_await boost::asio::this_coro::executor);
    auto const until = std::chrono::steady_clock::now() + deadline;
    while (ended() < number && std::chrono::steady_clock::now() < until) {
      wait.expires_after(1ms);
      co_await wait.async_wait(use_task);
    }
    co_return Result<AdmitFirst>(boost::system::error_code(errc::busy));
  }
  std::vector<bool> spins() {
    std::lock_guard lock(mutex_);
    return spins_;
  }
  void end_one() {
    std::lock_guard lock(mutex_);
    ++ended_;
  }

 private:
  std::size_t ended() {
    std::lock_guard lock(mutex_);
    return ended_;
  }
  std::mutex mutex_;
  std::vector<bool> spins_;
  std::size_t ended_ = 0;
};

// A gated ledger whose lone admissions go to a HeldDirect, and admissions
// of one run to make on it.
struct DirectRig {
  GatedLedger gated;
  HeldDirect& direct = held();
  Ledger& ledger = *gated.ledger;
  Loop loop;
  std::future<Result<Admission>> admit(const std::string& fp) {
    AdmitRequest request{reserve_request(fp, "k-" + fp, "run-s"), 10, FirstAttempt{3, Millis(1000)}};
    return loop.spawn(unboxed(ledger.admit(request, {})));
  }

 private:
  HeldDirect& held() {
    auto direct = std::make_unique<HeldDirect>();
    auto& kept = *direct;
    gated.ledger->admit_directly(std::move(direct));
    return kept;
  }
};

}  // namespace

TEST_CASE("unit: a direct admission may poll for its answer only if none came while the last one was out") {
  DirectRig rig;
  auto& [gated, direct, ledger, loop] = rig;
  gated.gate->release();
  // The first may: nothing came before it.
  auto first = rig.admit("fp-1");
  REQUIRE(wait_until([&] { return direct.spins().size() == 1; }));
  // Another comes while it is out: queued for the workers (the writer is
  // the direct one's), and taken once it is back.
  auto second = rig.admit("fp-2");
  REQUIRE(wait_until([&] { return ledger.queued() == 1; }));
  direct.end_one();
  CHECK(first.get().error() == errc::busy);
  CHECK(second.get().has_value());
  // The next must not poll: under load the thread has other work.
  auto third = rig.admit("fp-3");
  REQUIRE(wait_until([&] { return direct.spins().size() == 2; }));
  direct.end_one();
  CHECK(third.get().error() == errc::busy);
  // Nothing came while that one was out: the next may again.
  auto fourth = rig.admit("fp-4");
  REQUIRE(wait_until([&] { return direct.spins().size() == 3; }));
  direct.end_one();
  CHECK(fourth.get().error() == errc::busy);
  CHECK(direct.spins() == std::vector<bool>{true, false, true});
}

TEST_CASE("unit: after a batch of several admissions the next one goes to the workers, after a batch of one directly") {
  DirectRig rig;
  auto& [gated, direct, ledger, loop] = rig;
  // A charge holds the admissions' writer: two admissions queue behind it
  // and are then one batch.
  auto charge = loop.spawn(ledger.count_call("run-s", 10, CallKind::read));
  REQUIRE(gated.gate->wait_entered(1));
  auto first = rig.admit("fp-1");
  auto second = rig.admit("fp-2");
  REQUIRE(wait_until([&] { return ledger.queued() == 2; }));
  gated.gate->release();
  REQUIRE(charge.get().has_value());
  REQUIRE(first.get().has_value());
  REQUIRE(second.get().has_value());
  CHECK(gated.gate->batches() == std::vector<std::size_t>{2});
  // Under load: the next goes to the workers, though the writer is free.
  auto third = rig.admit("fp-3");
  REQUIRE(wait_until([&] {
    return !direct.spins().empty() || third.wait_for(0s) == std::future_status::ready;
  }));
  bool const queued = direct.spins().empty();
  if (!queued) direct.end_one();  // sent directly after all: let it end now
  REQUIRE(queued);
  REQUIRE(third.get().has_value());
  CHECK(gated.gate->batches() == std::vector<std::size_t>{2, 1});
  // That batch was one admission: the load is gone, the next goes directly.
  auto fourth = rig.admit("fp-4");
  REQUIRE(wait_until([&] { return direct.spins().size() == 1; }));
  direct.end_one();
  CHECK(fourth.get().error() == errc::busy);
  CHECK(gated.gate->batches() == std::vector<std::size_t>{2, 1});
}
