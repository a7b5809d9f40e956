// The Ledger facade's outcomes without a database: with concurrent writers
// an outcome has a writer lane of its own, outcomes after their answers (and
// nothing else) commit without waiting for the disk, gather a moment for
// others to share their commit, and are still written when the ledger stops.
#include "gated_ledger.hpp"

#include <algorithm>
#include <future>
#include <variant>

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;
using namespace std::chrono_literals;

namespace {

// Three workers on gated stores (with concurrent writers: outcomes get a
// writer lane of their own). The stores' calls and transactions are read
// together (any worker may run a batch).
struct LaneLedger {
  explicit LaneLedger(LedgerOptions options, bool concurrent_writers = true) {
    std::vector<std::unique_ptr<Store>> stores;
    for (int i = 0; i < 3; ++i) {
      auto store = std::make_unique<GatedStore>(concurrent_writers);
      gates.push_back(store.get());
      stores.push_back(std::move(store));
    }
    ledger = std::make_unique<Ledger>(std::move(stores), std::move(options));
  }
  void release() {
    for (auto* g : gates) g->release();
  }
  int entered() {
    int n = 0;
    for (auto* g : gates) n += g->entered();
    return n;
  }
  std::vector<std::vector<std::string>> transactions() { return all_of(&GatedStore::transactions); }
  std::vector<Store::Durability> durabilities() { return all_of(&GatedStore::durabilities); }
  std::vector<GatedStore*> gates;
  std::unique_ptr<Ledger> ledger;

 private:
  template <class T>
  std::vector<T> all_of(std::vector<T> (GatedStore::*read)()) {
    std::vector<T> all;
    for (auto* g : gates)
      for (auto& item : (g->*read)()) all.push_back(std::move(item));
    return all;
  }
};

// A LaneLedger whose first admission is held in its store (its writer
// busy), every other store open.
struct HeldAdmission {
  explicit HeldAdmission(bool concurrent_writers) : lanes({}, concurrent_writers) {
    admitted = loop.spawn(unboxed(ledger->admit(AdmitRequest{reserve_request("fp-1", "k-1"), 10, FirstAttempt{3, Millis(1000)}}, {})));
    REQUIRE(wait_until([&] { return lanes.entered() == 1; }));
    for (auto* g : lanes.gates)
      if (g->entered()) held = g;
    for (auto* g : lanes.gates)
      if (g != held) g->release();
  }
  std::future<Result<Intent>> outcome() {
    Outcome settle;
    settle.intent_id = 9;
    settle.attempt = 1;
    return loop.spawn(ledger->record_outcome(settle));
  }
  LaneLedger lanes;
  std::unique_ptr<Ledger>& ledger = lanes.ledger;
  GatedStore* held = nullptr;
  Loop loop;  // stopped before the ledger goes
  std::future<Result<Admission>> admitted;
};

bool gathering_done(std::future<Result<Intent>>& f) { return f.wait_for(0s) == std::future_status::ready; }

Outcome after_answer(std::int64_t id) {
  Outcome o;
  o.intent_id = id;
  o.attempt = 1;
  o.after_answer = true;
  return o;
}

}  // namespace

TEST_CASE("unit: with concurrent writers an outcome is written while an admission holds the admission writer") {
  HeldAdmission h(true);
  auto outcome = h.outcome();
  auto second = h.loop.spawn(unboxed(h.ledger->admit(AdmitRequest{reserve_request("fp-2", "k-2"), 10, FirstAttempt{3, Millis(1000)}}, {})));
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

// Calls made by `call(n)` for n = 1 to queued + 1: the first held in its
// store (its lane's writer busy), the others queued behind it; then all
// released, and each awaited.
template <class Call>
void held_then_queued(LaneLedger& lanes, int queued, Call call) {
  std::vector<decltype(call(1))> done;
  done.push_back(call(1));
  REQUIRE(wait_until([&] { return lanes.entered() == 1; }));
  for (int n = 2; n <= queued + 1; ++n) done.push_back(call(n));
  REQUIRE(wait_until([&] { return lanes.ledger->queued() == static_cast<std::size_t>(queued); }));
  lanes.release();
  for (auto& d : done) {
    REQUIRE(d.wait_for(deadline) == std::future_status::ready);
    CHECK(d.get().has_value());
  }
}

// The reservation batch sizes of admissions held_then_queued, smallest first.
std::vector<std::size_t> admission_batches(LedgerOptions options, bool concurrent_writers, int queued) {
  LaneLedger lanes(std::move(options), concurrent_writers);
  Loop loop;
  held_then_queued(lanes, queued, [&](int n) {
    auto const id = std::to_string(n);
    return loop.spawn(unboxed(lanes.ledger->admit(
        AdmitRequest{reserve_request("fp-" + id, "k-" + id), 10, FirstAttempt{3, Millis(1000)}}, {})));
  });
  std::vector<std::size_t> sizes;
  for (auto* g : lanes.gates)
    for (auto n : g->batches()) sizes.push_back(n);
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

// The same for outcomes (not after an answer: none gathers): the sizes of
// the transactions that wrote two or more, smallest first (the rig runs a
// lone call without a transaction).
std::vector<std::size_t> outcome_batches(LedgerOptions options, int queued) {
  LaneLedger lanes(std::move(options));
  Loop loop;
  held_then_queued(lanes, queued, [&](int n) {
    Outcome o;
    o.intent_id = n;
    o.attempt = 1;
    return loop.spawn(lanes.ledger->record_outcome(o));
  });
  std::vector<std::size_t> sizes;
  for (const auto& t : lanes.transactions()) sizes.push_back(t.size());
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

// With two lanes an admissions' batch takes at most admission_batch calls:
// the admissions waiting when the writer comes back go in batches of that
// many, one after another. With one lane the cap does not apply (outcomes
// share those batches), nor below it.
TEST_CASE("unit: with two lanes, admissions waiting for the writer go in batches of admission_batch at most") {
  LedgerOptions options;
  options.admission_batch = 3;
  CHECK(admission_batches(options, true, 7) == std::vector<std::size_t>{1, 1, 3, 3});
  CHECK(admission_batches(options, false, 7) == std::vector<std::size_t>{1, 7});
  CHECK(admission_batches(LedgerOptions{}, true, 7) == std::vector<std::size_t>{1, 7});
  // max_batch bounds it too.
  options.admission_batch = 64;
  options.max_batch = 2;
  CHECK(admission_batches(options, true, 5) == std::vector<std::size_t>{1, 1, 2, 2});
  CHECK(LedgerOptions{}.admission_batch == 128);
  // The outcomes' lane keeps max_batch.
  LedgerOptions outcomes;
  outcomes.admission_batch = 3;
  CHECK(outcome_batches(outcomes, 7) == std::vector<std::size_t>{7});
  outcomes.max_batch = 3;
  CHECK(outcome_batches(outcomes, 7) == std::vector<std::size_t>{3, 3});
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

TEST_CASE("unit: an outcome after its answer starts no batch while it gathers, and its lane's next batch takes it") {
  LedgerOptions options;
  options.outcome_gather = std::chrono::hours(1);
  LaneLedger lanes(options);
  lanes.release();
  Loop loop;
  auto gathering = loop.spawn(lanes.ledger->record_outcome(after_answer(2)));
  // Queued, and no batch began with it.
  REQUIRE(wait_until([&] { return lanes.ledger->queued() == 1; }));
  CHECK(lanes.entered() == 0);
  // An admission's batch (the other lane) leaves it where it is.
  AdmitRequest admit{reserve_request("fp-1", "k-1"), 10, FirstAttempt{3, Millis(1000)}};
  CHECK(loop.spawn(unboxed(lanes.ledger->admit(admit, {}))).get().has_value());
  CHECK(lanes.ledger->queued() == 1);
  CHECK(!gathering_done(gathering));
  // The next batch that may take it does: a lookup's, here.
  CHECK(loop.spawn(lanes.ledger->find_intent(7)).get().error() == errc::not_found);
  CHECK(gathering.get().has_value());
  // In the lookup's transaction, and in no other.
  auto const all = lanes.transactions();
  auto const with_it = std::count_if(all.begin(), all.end(), [](const auto& t) {
    return std::find(t.begin(), t.end(), "record_outcome 2") != t.end();
  });
  CHECK(with_it == 1);
  CHECK(std::count(all.begin(), all.end(), std::vector<std::string>{"record_outcome 2", "find_intent"}) == 1);
}

// Outcomes queued while their lane's writer is busy wake no other worker
// (none could take them): the writer takes them when its batch ends, at
// once if their time has passed meanwhile, else once it has.
TEST_CASE("unit: outcomes queued while their lane's writer is busy are written when its batch ends") {
  for (auto gather : {std::chrono::milliseconds(1), std::chrono::milliseconds(300)}) {
    CAPTURE(gather.count());
    LedgerOptions options;
    options.outcome_gather = gather;
    LaneLedger lanes(options);
    Loop loop;
    // The first outcome's batch holds the outcome lane's writer in its store.
    auto first = loop.spawn(lanes.ledger->record_outcome(after_answer(1)));
    REQUIRE(wait_until([&] { return lanes.entered() == 1; }));
    auto const queued_at = std::chrono::steady_clock::now();
    auto second = loop.spawn(lanes.ledger->record_outcome(after_answer(2)));
    auto third = loop.spawn(lanes.ledger->record_outcome(after_answer(3)));
    REQUIRE(wait_until([&] { return lanes.ledger->queued() == 2; }));
    if (gather == std::chrono::milliseconds(1)) {
      // Their time passes while the writer is still busy: they stay queued.
      REQUIRE(wait_until([&] { return std::chrono::steady_clock::now() - queued_at > 10 * gather; }));
      CHECK(lanes.ledger->queued() == 2);
      CHECK(lanes.entered() == 1);
    }
    lanes.release();
    REQUIRE(first.wait_for(deadline) == std::future_status::ready);
    REQUIRE(second.wait_for(deadline) == std::future_status::ready);
    REQUIRE(third.wait_for(deadline) == std::future_status::ready);
    CHECK(first.get().has_value());
    CHECK(second.get().has_value());
    CHECK(third.get().has_value());
    CHECK(std::chrono::steady_clock::now() - queued_at >= gather);
    CHECK(lanes.ledger->queued() == 0);
    if (gather == std::chrono::milliseconds(1)) {
      // Both due when the writer came back: one batch of their own.
      auto all = lanes.transactions();
      std::sort(all.begin(), all.end());
      CHECK(all == std::vector<std::vector<std::string>>{{"record_outcome 1"},
                                                         {"record_outcome 2", "record_outcome 3"}});
    }
  }
}

TEST_CASE("unit: a gathering outcome alone is written once its time has passed, deferred") {
  LedgerOptions options;
  options.outcome_gather = 200ms;
  LaneLedger lanes(options);
  lanes.release();
  Loop loop;
  auto const start = std::chrono::steady_clock::now();
  auto outcome = loop.spawn(lanes.ledger->record_outcome(after_answer(2)));
  CHECK(outcome.get().has_value());
  CHECK(std::chrono::steady_clock::now() - start >= options.outcome_gather);
  CHECK(lanes.transactions() == std::vector<std::vector<std::string>>{{"record_outcome 2"}});
  CHECK(lanes.durabilities() == std::vector<Store::Durability>{Store::Durability::deferred});
}

TEST_CASE("unit: with one lane an outcome after its answer does not wait for others") {
  // It could only join the next admission's batch, on that request's path.
  LedgerOptions options;
  options.outcome_gather = std::chrono::hours(1);
  GatedLedger gated(options);
  gated.gate->release();
  Loop loop;
  CHECK(loop.spawn(gated.ledger->record_outcome(after_answer(2))).get().has_value());
  CHECK(gated.gate->durabilities() == std::vector<Store::Durability>{Store::Durability::deferred});
}

TEST_CASE("unit: stopping, the ledger still writes the outcomes after their answers it holds") {
  LedgerOptions options;
  options.outcome_gather = std::chrono::hours(1);
  LaneLedger lanes(options);
  Loop loop;
  // Every worker is held in a first call; behind them a lookup, and an
  // outcome after its answer, gathering.
  std::vector<std::future<Result<Intent>>> running;
  for (int i = 0; i < 3; ++i) {
    running.push_back(loop.spawn(lanes.ledger->find_intent(i)));
    REQUIRE(wait_until([&] { return lanes.entered() == i + 1; }));
  }
  auto outcome = loop.spawn(lanes.ledger->record_outcome(after_answer(2)));
  auto lookup = loop.spawn(lanes.ledger->find_intent(7));
  REQUIRE(wait_until([&] { return lanes.ledger->queued() == 2; }));
  std::thread stopping([&] { lanes.ledger.reset(); });
  // The lookup is refused at once; the outcome waits for a worker.
  CHECK(lookup.get().error() == errc::shutting_down);
  lanes.release();
  stopping.join();
  for (auto& r : running) CHECK(r.get().error() == errc::not_found);
  // Written by a store (gone with the ledger now), not refused.
  CHECK(outcome.get().has_value());
}

TEST_CASE("unit: Ledger::open gathers outcomes for ledger.outcome_gather") {
  auto backend = sqlite_backend();
  backend->config.outcome_gather = 37ms;
  auto ledger = open_ledger(*backend);
  CHECK(ledger->options().outcome_gather == 37ms);
  CHECK(LedgerOptions{}.outcome_gather == idemgate::config::Ledger{}.outcome_gather);  // one default
}

// A batch's worth of gathering outcomes starts at once: at a rate where
// outcome_gather holds more outcomes than one batch takes, they would fill
// the queue (and its limit would refuse admissions) while they waited.
TEST_CASE("unit: a batch's worth of gathering outcomes is written at once, in one batch") {
  LedgerOptions options;
  options.outcome_gather = std::chrono::hours(1);
  options.max_batch = 4;
  LaneLedger lanes(options);
  lanes.release();
  Loop loop;
  std::vector<std::future<Result<Intent>>> outcomes;
  for (std::int64_t id = 1; id <= 3; ++id) outcomes.push_back(loop.spawn(lanes.ledger->record_outcome(after_answer(id))));
  // Three of four: they gather.
  REQUIRE(wait_until([&] { return lanes.ledger->queued() == 3; }));
  CHECK(lanes.entered() == 0);
  CHECK(!gathering_done(outcomes.front()));
  // The fourth fills a batch: all four are written now, together.
  outcomes.push_back(loop.spawn(lanes.ledger->record_outcome(after_answer(4))));
  for (auto& o : outcomes) {
    REQUIRE(o.wait_for(deadline) == std::future_status::ready);
    CHECK(o.get().has_value());
  }
  CHECK(lanes.transactions() == std::vector<std::vector<std::string>>{
                                    {"record_outcome 1", "record_outcome 2", "record_outcome 3", "record_outcome 4"}});
  CHECK(lanes.durabilities() == std::vector<Store::Durability>{Store::Durability::deferred});
  CHECK(lanes.ledger->queued() == 0);
  // The count starts again: a fifth gathers, until a batch takes it along.
  auto fifth = loop.spawn(lanes.ledger->record_outcome(after_answer(5)));
  CHECK(fifth.wait_for(100ms) == std::future_status::timeout);
  CHECK(lanes.ledger->queued() == 1);
  CHECK(lanes.transactions().size() == 1);
  CHECK(loop.spawn(lanes.ledger->find_intent(7)).get().error() == errc::not_found);
  CHECK(fifth.get().has_value());
}

// With a small queue a quarter of it is a batch's worth: the gathering
// outcomes never hold the queue.
TEST_CASE("unit: with a small ledger queue, a quarter of it gathered is written at once") {
  LedgerOptions options;
  options.outcome_gather = std::chrono::hours(1);
  options.queue_limit = 8;
  LaneLedger lanes(options);
  lanes.release();
  Loop loop;
  auto first = loop.spawn(lanes.ledger->record_outcome(after_answer(1)));
  REQUIRE(wait_until([&] { return lanes.ledger->queued() == 1; }));
  CHECK(!gathering_done(first));
  auto second = loop.spawn(lanes.ledger->record_outcome(after_answer(2)));
  REQUIRE(first.wait_for(deadline) == std::future_status::ready);
  REQUIRE(second.wait_for(deadline) == std::future_status::ready);
  CHECK(first.get().has_value());
  CHECK(second.get().has_value());
  CHECK(lanes.transactions() == std::vector<std::vector<std::string>>{{"record_outcome 1", "record_outcome 2"}});
}

namespace {

// Tells a promise how its record ended, and keeps the outcome it holds.
class KeptWatcher final : public OutcomeWatcher {
 public:
  explicit KeptWatcher(std::promise<std::pair<Result<void>, Outcome>>& told) : told_(told) {}
  void done(std::unique_ptr<Watcher<void>>, Result<void> result) override { told_.set_value({result, outcome}); }

 private:
  std::promise<std::pair<Result<void>, Outcome>>& told_;
};

}  // namespace

TEST_CASE("unit: a watched outcome whose batch failed by an exception is left whole for its next try") {
  GatedLedger gated;
  gated.gate->release();
  Loop loop;
  auto record = [&](std::promise<std::pair<Result<void>, Outcome>>& told) {
    auto watcher = std::make_unique<KeptWatcher>(told);
    watcher->outcome = after_answer(4);
    watcher->outcome.answer_class = "ok";
    watcher->outcome.state = IntentState::completed;
    watcher->outcome.receipt = "ch_4";
    watcher->outcome.response = StoredResponse{200, {{"content-type", "application/json"}}, R"({"id":"ch_4"})", false};
    gated.ledger->record_outcome(loop.io.get_executor(), std::move(watcher));
  };
  // The store throws while the outcome is moved out into the batch's list.
  gated.gate->throw_next_outcome();
  std::promise<std::pair<Result<void>, Outcome>> first;
  record(first);
  auto failed = first.get_future();
  REQUIRE(failed.wait_for(deadline) == std::future_status::ready);
  auto [result, kept] = failed.get();
  CHECK(result.error() == errc::storage_failure);
  // What the watcher records again is what it gave, not a moved-from husk.
  CHECK(kept.intent_id == 4);
  CHECK(kept.answer_class == "ok");
  CHECK(kept.receipt == "ch_4");
  REQUIRE(kept.response.has_value());
  CHECK(kept.response->status == 200);
  CHECK(kept.response->body == R"({"id":"ch_4"})");
  CHECK(kept.response->headers.size() == 1);
  // And the next try lands.
  std::promise<std::pair<Result<void>, Outcome>> second;
  record(second);
  auto landed = second.get_future();
  REQUIRE(landed.wait_for(deadline) == std::future_status::ready);
  CHECK(landed.get().first.has_value());
}
