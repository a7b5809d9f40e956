// The Ledger facade's test rig without a database (queue_test.cpp,
// outcome_queue_test.cpp): a Store that holds every call until the test
// releases it and records the transactions it ran, an io_context on a
// thread of its own, and a Ledger with one worker on such a store.
#pragma once

#include "backend.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <condition_variable>
#include <functional>
#include <mutex>

namespace idemgate::ledger::test {

using namespace std::chrono_literals;

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

  // From now on a reservation's start is ignored (the row stored without its
  // attempt begun, as a store that cannot do both in one statement), and
  // begin_attempt begins attempt 1 of the intent it is given, as Store does
  // (key "begun-ID"): the Ledger's own begin_attempts step is taken instead.
  void begin_apart() {
    std::lock_guard lock(mutex_);
    begin_apart_ = true;
  }

  // The next record_outcome throws (as an allocation that fails would); the
  // batch then fails with storage_failure, as the real stores' batch() does.
  void throw_next_outcome() {
    std::lock_guard lock(mutex_);
    throw_outcome_ = true;
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
    bool threw = false;
    try {
      body();
    } catch (const std::exception&) {
      threw = true;
    }
    std::lock_guard lock(mutex_);
    in_batch_ = false;
    return threw ? boost::system::error_code(errc::storage_failure) : batch_error_;
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
      reservation.started = request.start.has_value() && !begin_apart_;
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
    std::lock_guard lock(mutex_);
    if (!begin_apart_) return AttemptStart{};
    Intent begun;
    begun.id = r.intent_id;
    begun.key = "begun-" + std::to_string(r.intent_id);
    begun.state = IntentState::dispatched;
    begun.attempts = r.expected_attempts + 1;
    return AttemptStart{AttemptOutcome::started, begun.attempts, std::move(begun)};
  }
  Result<Intent> record_outcome(const Outcome& o) override {
    enter("record_outcome " + std::to_string(o.intent_id));
    if (std::lock_guard lock(mutex_); std::exchange(throw_outcome_, false)) throw std::bad_alloc();
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
  bool begin_apart_ = false;
  bool throw_outcome_ = false;
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
  std::future<T> spawn(Task<T> op) {
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

inline bool wait_until(const std::function<bool()>& condition) {
  auto until = std::chrono::steady_clock::now() + deadline;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}


}  // namespace idemgate::ledger::test
