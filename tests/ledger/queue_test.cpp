// The Ledger facade without a database: a full queue answers busy at once
// (while the worker is still stuck), calls waiting together are committed in
// one Store::batch() (group commit; reservations in one Store call), in lock
// order, a batch that fails fails every call in it, one worker at a time
// writes, and an admission is one transaction in three steps.
#include "backend.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <condition_variable>
#include <mutex>
#include <variant>

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;
using namespace std::chrono_literals;

namespace {

const auto deadline = 20s;

// Holds every call until released, so the test decides when the worker moves.
class GatedStore final : public Store {
 public:
  explicit GatedStore(bool concurrent_writers = false) : concurrent_writers_(concurrent_writers) {}
  bool concurrent_writers() const noexcept override { return concurrent_writers_; }
  void release() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  bool wait_entered(int n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, deadline, [&] { return entered_ >= n; });
  }
  int entered() {
    std::lock_guard lock(mutex_);
    return entered_;
  }
  std::vector<std::size_t> batches() {
    std::lock_guard lock(mutex_);
    return batches_;
  }
  // The calls each Store::batch() ran, in order.
  std::vector<std::vector<std::string>> transactions() {
    std::lock_guard lock(mutex_);
    return transactions_;
  }
  // Every batch() from now on fails with `why` (after running its body).
  void fail_batches(boost::system::error_code why) {
    std::lock_guard lock(mutex_);
    batch_error_ = why;
  }

  // The Durability each Store::batch() was asked for, in order.
  std::vector<Durability> durabilities() {
    std::lock_guard lock(mutex_);
    return durabilities_;
  }

  boost::system::error_code batch(const std::function<void()>& body, Calls, Durability durability) override {
    {
      std::lock_guard lock(mutex_);
      transactions_.emplace_back();
      durabilities_.push_back(durability);
      in_batch_ = true;
    }
    body();
    std::lock_guard lock(mutex_);
    in_batch_ = false;
    return batch_error_;
  }

  std::vector<Result<Reservation>> reserve_intents(std::span<const ReserveRequest> r) override {
    std::string started;
    for (const auto& request : r)
      if (request.start) started += " start " + request.start->replica;
    enter("reserve_intents" + started);
    std::lock_guard lock(mutex_);
    batches_.push_back(r.size());
    std::vector<Result<Reservation>> out;
    for (const auto& request : r) {
      Reservation reservation;
      reservation.intent.key = request.key;
      // As a real store: a fresh row stored with its first attempt begun.
      reservation.started = request.start.has_value();
      if (reservation.started) {
        reservation.intent.state = IntentState::dispatched;
        reservation.intent.attempts = 1;
      }
      out.push_back(reservation);
    }
    return out;
  }
  Result<Intent> find_intent(std::int64_t) override {
    enter("find_intent");
    return boost::system::error_code(errc::not_found);
  }
  Result<RunCharge> count_call(const std::string& run, std::int64_t, CallKind) override {
    enter("count_call " + run);
    return RunCharge{};
  }
  Result<AttemptStart> begin_attempt(const AttemptRequest& r, const std::string&) override {
    enter("begin_attempt " + std::to_string(r.intent_id));
    return AttemptStart{};
  }
  Result<Intent> record_outcome(const Outcome& o) override {
    enter("record_outcome " + std::to_string(o.intent_id));
    if (o.attempt == 0) return boost::system::error_code(errc::illegal_transition);
    return Intent{};
  }

  Result<int> migrate() override { return 0; }
  Result<Intent> find_intent_by_key(const std::string&) override { return none(); }
  Result<std::vector<Intent>> list_intents_by_run(const std::string&, int) override { return none(); }
  Result<std::int64_t> count_intents(const std::string&, const std::string&, const std::string&,
                                     std::int64_t) override {
    return none();
  }
  Result<std::vector<Intent>> list_unknown_past_ttl(int) override { return none(); }
  Result<std::vector<Intent>> list_unescalated_unknowns(int) override { return none(); }
  Result<std::vector<Intent>> claim_lookups(std::span<const LookupDue>, int) override { return none(); }
  Result<Run> find_run(const std::string&) override { return none(); }
  Result<Run> set_run_state(const std::string&, RunState, const std::string&) override { return none(); }
  Result<std::int64_t> persist_escalation(const EscalationRequest&) override { return none(); }
  Result<Escalation> find_escalation(std::int64_t) override { return none(); }
  Result<std::vector<Escalation>> list_escalations(std::optional<EscalationState>, int) override {
    return none();
  }
  Result<Escalation> resolve_escalation(const ResolveRequest&) override { return none(); }
  Result<void> record_refusal(std::int64_t, const std::string&) override { return none(); }
  Result<Signals> read_signals(TimePoint) override { return none(); }
  Result<int> recover_expired() override { return none(); }

 private:
  const bool concurrent_writers_;
  static boost::system::error_code none() { return errc::not_found; }
  void enter(std::string call) {
    std::unique_lock lock(mutex_);
    if (in_batch_) transactions_.back().push_back(std::move(call));
    ++entered_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_; });
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  int entered_ = 0;
  bool open_ = false;
  std::vector<std::size_t> batches_;
  std::vector<std::vector<std::string>> transactions_;
  std::vector<Durability> durabilities_;
  bool in_batch_ = false;
  boost::system::error_code batch_error_;
};

// An io_context running on its own thread for the length of a test.
struct Loop {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
  ~Loop() {
    work.reset();
    thread.join();
  }
  template <class T>
  std::future<T> spawn(boost::asio::awaitable<T> op) {
    return boost::asio::co_spawn(io, std::move(op), boost::asio::use_future);
  }
};

// A Ledger whose only worker runs on a GatedStore.
struct GatedLedger {
  explicit GatedLedger(LedgerOptions options = {}) {
    auto store = std::make_unique<GatedStore>();
    gate = store.get();
    std::vector<std::unique_ptr<Store>> stores;
    stores.push_back(std::move(store));
    ledger = std::make_unique<Ledger>(std::move(stores), std::move(options));
  }
  GatedStore* gate;
  std::unique_ptr<Ledger> ledger;
};

bool wait_until(const std::function<bool()>& condition) {
  auto until = std::chrono::steady_clock::now() + deadline;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace

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
    CHECK(refused.get().error() == errc::busy);
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

TEST_CASE("unit: one writer: locking calls wait for its commit and go together; lookups are served meanwhile") {
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

TEST_CASE("unit: an admission runs its charge first, then its reservation, which begins the attempt when counted") {
  GatedLedger gated;
  auto& gate = *gated.gate;
  auto& ledger = gated.ledger;
  Loop loop;
  auto running = loop.spawn(ledger->find_intent(1));
  REQUIRE(gate.wait_entered(1));
  AdmitRequest admit{reserve_request("fp-1", "k-1", "run-b"), 10, FirstAttempt{3, Millis(1000)}};
  auto admitted = loop.spawn(ledger->admit(admit, {}));
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
  CHECK(a->start->intent.state == IntentState::dispatched);
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
  auto single = loop.spawn(ledger->admit(alone, {}));
  REQUIRE(single.get().has_value());
  CHECK(gate.transactions().size() == 2);
}

namespace {

// Three workers on gated stores; the first admission is held in its store
// (its writer busy), every other store open.
struct HeldAdmission {
  explicit HeldAdmission(bool concurrent_writers) {
    std::vector<std::unique_ptr<Store>> stores;
    for (int i = 0; i < 3; ++i) {
      auto store = std::make_unique<GatedStore>(concurrent_writers);
      gates.push_back(store.get());
      stores.push_back(std::move(store));
    }
    ledger = std::make_unique<Ledger>(std::move(stores), LedgerOptions{});
    admitted = loop.spawn(ledger->admit(AdmitRequest{reserve_request("fp-1", "k-1"), 10, FirstAttempt{3, Millis(1000)}}, {}));
    REQUIRE(wait_until([&] { return gates[0]->entered() + gates[1]->entered() + gates[2]->entered() == 1; }));
    for (auto* g : gates)
      if (g->entered()) held = g;
    for (auto* g : gates)
      if (g != held) g->release();
  }
  std::future<Result<Intent>> outcome() {
    Outcome settle;
    settle.intent_id = 9;
    settle.attempt = 1;
    return loop.spawn(ledger->record_outcome(settle));
  }
  std::vector<GatedStore*> gates;
  GatedStore* held = nullptr;
  std::unique_ptr<Ledger> ledger;
  Loop loop;  // stopped before the ledger goes
  std::future<Result<Admission>> admitted;
};

}  // namespace

TEST_CASE("unit: with concurrent writers an outcome is written while an admission holds the admission writer") {
  HeldAdmission h(true);
  auto outcome = h.outcome();
  auto second = h.loop.spawn(h.ledger->admit(AdmitRequest{reserve_request("fp-2", "k-2"), 10, FirstAttempt{3, Millis(1000)}}, {}));
  // The outcome is written by another worker at once; the second admission
  // waits for the first one's commit.
  REQUIRE(outcome.wait_for(deadline) == std::future_status::ready);
  CHECK(outcome.get().has_value());
  REQUIRE(wait_until([&] { return h.ledger->queued() == 1; }));
  CHECK(second.wait_for(0s) == std::future_status::timeout);
  h.held->release();
  REQUIRE(h.admitted.get().has_value());
  REQUIRE(second.get().has_value());
}

TEST_CASE("unit: without concurrent writers an outcome waits for the one writer") {
  HeldAdmission h(false);
  auto outcome = h.outcome();
  REQUIRE(wait_until([&] { return h.ledger->queued() == 1; }));
  CHECK(outcome.wait_for(50ms) == std::future_status::timeout);
  h.held->release();
  REQUIRE(h.admitted.get().has_value());
  CHECK(outcome.get().has_value());
}

TEST_CASE("unit: outcomes after their answers, and nothing else, commit without waiting for the disk") {
  auto after = [](std::int64_t id, bool after_answer) {
    Outcome o;
    o.intent_id = id;
    o.attempt = 1;
    o.after_answer = after_answer;
    return o;
  };
  using D = Store::Durability;
  // Held behind a first call, then released: the queued calls are one batch.
  auto batch_of = [&](std::vector<std::variant<Outcome, std::string>> calls) {
    GatedLedger gated;
    Loop loop;
    auto running = loop.spawn(gated.ledger->find_intent(1));
    REQUIRE(gated.gate->wait_entered(1));
    std::vector<std::future<Result<Intent>>> done;
    for (auto& call : calls) {
      if (auto* o = std::get_if<Outcome>(&call))
        done.push_back(loop.spawn(gated.ledger->record_outcome(*o)));
      else
        done.push_back(loop.spawn(gated.ledger->find_intent(7)));
    }
    REQUIRE(wait_until([&] { return gated.ledger->queued() == calls.size(); }));
    gated.gate->release();
    CHECK(running.get().error() == errc::not_found);
    for (auto& d : done) d.get();
    return gated.gate->durabilities();
  };
  // Two after their answers: one deferred transaction.
  CHECK(batch_of({after(2, true), after(3, true)}) == std::vector<D>{D::deferred});
  // One alone: a transaction of its own, deferred (not a bare call, which
  // would commit flushed).
  CHECK(batch_of({after(2, true)}) == std::vector<D>{D::deferred});
  // Beside an outcome the request path waits for, or any other call: flushed.
  CHECK(batch_of({after(2, true), after(3, false)}) == std::vector<D>{D::flushed});
  CHECK(batch_of({after(2, true), std::string("find_intent")}) == std::vector<D>{D::flushed});
  // One on the request path alone is a bare call: no batch at all.
  CHECK(batch_of({after(2, false)}).empty());
}
