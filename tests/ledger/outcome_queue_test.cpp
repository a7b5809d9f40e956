// The Ledger facade's outcomes without a database: with concurrent writers
// an outcome has a writer lane of its own, outcomes after their answers (and
// nothing else) commit without waiting for the disk, gather a moment for
// others to share their commit, and are still written when the ledger stops.
#include "gated_ledger.hpp"

#include <variant>

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;
using namespace std::chrono_literals;

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

TEST_CASE("unit: an outcome after its answer starts no batch while it gathers, and the next batch takes it") {
  LedgerOptions options;
  options.outcome_gather = std::chrono::hours(1);
  GatedLedger gated(options);
  gated.gate->release();
  Loop loop;
  auto outcome = loop.spawn(gated.ledger->record_outcome(after_answer(2)));
  // Queued, and no batch began with it.
  REQUIRE(wait_until([&] { return gated.ledger->queued() == 1; }));
  CHECK(gated.gate->entered() == 0);
  // A call of its lane (one lane here) starts a batch: the outcome joins it.
  auto lookup = loop.spawn(gated.ledger->find_intent(7));
  CHECK(lookup.get().error() == errc::not_found);
  CHECK(outcome.get().has_value());
  CHECK(gated.gate->transactions() == std::vector<std::vector<std::string>>{{"record_outcome 2", "find_intent"}});
  CHECK(gated.gate->durabilities() == std::vector<Store::Durability>{Store::Durability::flushed});
}

TEST_CASE("unit: a gathering outcome alone is written once its time has passed, deferred") {
  LedgerOptions options;
  options.outcome_gather = 200ms;
  GatedLedger gated(options);
  gated.gate->release();
  Loop loop;
  auto const start = std::chrono::steady_clock::now();
  auto outcome = loop.spawn(gated.ledger->record_outcome(after_answer(2)));
  CHECK(outcome.get().has_value());
  CHECK(std::chrono::steady_clock::now() - start >= options.outcome_gather);
  CHECK(gated.gate->transactions() == std::vector<std::vector<std::string>>{{"record_outcome 2"}});
  CHECK(gated.gate->durabilities() == std::vector<Store::Durability>{Store::Durability::deferred});
}

TEST_CASE("unit: stopping, the ledger still writes the outcomes after their answers it holds") {
  LedgerOptions options;
  options.outcome_gather = std::chrono::hours(1);
  GatedLedger gated(options);
  Loop loop;
  // The worker is held in a first call; behind it an outcome after its
  // answer and a lookup.
  auto running = loop.spawn(gated.ledger->find_intent(1));
  REQUIRE(gated.gate->wait_entered(1));
  auto outcome = loop.spawn(gated.ledger->record_outcome(after_answer(2)));
  auto lookup = loop.spawn(gated.ledger->find_intent(7));
  REQUIRE(wait_until([&] { return gated.ledger->queued() == 2; }));
  std::thread stopping([&] { gated.ledger.reset(); });
  // The lookup is refused at once; the outcome waits for the worker.
  CHECK(lookup.get().error() == errc::shutting_down);
  gated.gate->release();
  stopping.join();
  CHECK(running.get().error() == errc::not_found);
  // Written by the store (which is gone with the ledger now), not refused.
  CHECK(outcome.get().has_value());
}
