// Reservation atomicity: one winner per scope+fingerprint however many
// callers race, in one process or across two Ledgers (two replicas); the
// attempt compare-and-set; agent keys bound to their first fingerprint.
#include "backend.hpp"

#include "ledger/open_store.hpp"
#include "ledger/executor.hpp"

#include <set>

using idemgate::Task;

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

namespace {

std::vector<Result<Reservation>> race(std::vector<Ledger*> ledgers, int callers,
                                      const std::string& fingerprint) {
  std::vector<Task<Result<Reservation>>> ops;
  for (int i = 0; i < callers; ++i)
    ops.push_back(ledgers[i % ledgers.size()]->reserve_intent(
        reserve_request(fingerprint, "key-" + std::to_string(i)), {}));
  return run_all(std::move(ops), 4);
}

void expect_one_winner(const std::vector<Result<Reservation>>& results) {
  int winners = 0;
  std::set<std::int64_t> ids;
  std::string winning_key;
  for (const auto& r : results) {
    REQUIRE_MESSAGE(r.has_value(), r.error().message());
    ids.insert(r->intent.id);
    if (r->outcome == ReserveOutcome::reserved) {
      ++winners;
      winning_key = r->intent.key;
    } else {
      CHECK(r->outcome == ReserveOutcome::existing);
    }
  }
  CHECK(winners == 1);
  CHECK(ids.size() == 1);
  // Every loser sees the winner's key: the provider will only ever see one.
  for (const auto& r : results) CHECK(r->intent.key == winning_key);
}

}  // namespace

LEDGER_CONFORMANCE(sixty_four_reservers, "64 concurrent reservers of one fingerprint: one winner") {
  auto ledger = open_ledger(backend);
  expect_one_winner(race({ledger.get()}, 64, "fp-64"));
  auto stats = ledger->stats().reservations.load();
  CHECK(stats == 64);
}

LEDGER_CONFORMANCE(two_replicas, "two Ledgers on one database racing: one winner") {
  auto a = open_ledger(backend, "replica-a");
  auto b = open_ledger(backend, "replica-b");
  auto results = race({a.get(), b.get()}, 64, "fp-two-replicas");
  expect_one_winner(results);

  // And the attempt compare-and-set across both: one dispatch.
  auto id = results.front()->intent.id;
  std::vector<Task<Result<AttemptStart>>> ops;
  for (int i = 0; i < 32; ++i) ops.push_back((i % 2 ? a : b)->begin_attempt(AttemptRequest{id, IntentState::reserved, 0, 3, std::chrono::minutes(1)}));
  int started = 0;
  for (const auto& r : run_all(std::move(ops), 4)) {
    REQUIRE_MESSAGE(r.has_value(), r.error().message());
    if (r->outcome == AttemptOutcome::started) {
      ++started;
      CHECK(r->attempt == 1);
    } else {
      // Decided from "reserved", found dispatched: decide again, never send.
      CHECK(r->outcome == AttemptOutcome::changed);
      CHECK(r->intent.state == IntentState::dispatched);
    }
  }
  CHECK(started == 1);
}

LEDGER_CONFORMANCE(many_fingerprints, "concurrent reservations of distinct fingerprints all win") {
  auto ledger = open_ledger(backend);
  std::vector<Task<Result<Reservation>>> ops;
  for (int i = 0; i < 200; ++i)
    ops.push_back(ledger->reserve_intent(
        reserve_request("fp-" + std::to_string(i), "k-" + std::to_string(i)), {}));
  std::set<std::int64_t> ids;
  for (const auto& r : run_all(std::move(ops), 4)) {
    REQUIRE_MESSAGE(r.has_value(), r.error().message());
    CHECK(r->outcome == ReserveOutcome::reserved);
    ids.insert(r->intent.id);
  }
  CHECK(ids.size() == 200);
  MESSAGE(backend.name() << ": 200 reservations in " << ledger->stats().reserve_batches.load()
                         << " transactions");
}

LEDGER_CONFORMANCE(agent_keys, "an agent key is bound to its first fingerprint") {
  auto ledger = open_ledger(backend);
  auto request = [](std::string fp, std::string minted, std::string agent) {
    auto r = reserve_request(fp, minted);
    r.agent_key = agent;
    return r;
  };
  auto first = run(ledger->reserve_intent(request("fp-a", "minted-1", "agent-1"), {}));
  REQUIRE(first.has_value());
  CHECK(first->outcome == ReserveOutcome::reserved);

  // Same key, different payload: 422, pointing at the bound intent.
  auto other = run(ledger->reserve_intent(request("fp-b", "minted-2", "agent-1"), {}));
  REQUIRE(other.has_value());
  CHECK(other->outcome == ReserveOutcome::key_mismatch);
  CHECK(other->intent.id == first->intent.id);

  // A fresh key minted inside the agent's retry loop: the same intent, with
  // the original key.
  auto retry = run(ledger->reserve_intent(request("fp-a", "minted-3", "agent-2"), {}));
  REQUIRE(retry.has_value());
  CHECK(retry->outcome == ReserveOutcome::existing);
  CHECK(retry->intent.key == "minted-1");

  for (auto key : {"agent-1", "agent-2", "minted-1"}) {
    auto found = run(ledger->find_intent_by_key(key));
    REQUIRE(found.has_value());
    CHECK(found->id == first->intent.id);
  }
  CHECK(run(ledger->find_intent_by_key("never-seen")).error() == errc::not_found);

  // Another run's scope is separate.
  auto elsewhere = run(ledger->reserve_intent(
      [] {
        auto r = reserve_request("fp-b", "minted-4", "run-2");
        r.agent_key = "agent-1";
        return r;
      }(),
      {}));
  REQUIRE(elsewhere.has_value());
  CHECK(elsewhere->outcome == ReserveOutcome::reserved);

  auto listed = run(ledger->list_intents_by_run("run-1"));
  REQUIRE(listed.has_value());
  CHECK(listed->size() == 1);
}

LEDGER_CONFORMANCE(invalid_reservation, "a reservation without key or fingerprint is refused") {
  auto ledger = open_ledger(backend);
  auto result = run(ledger->reserve_intent(reserve_request("", "k"), {}));
  CHECK(result.error() == errc::invalid_argument);
}

// One multi-row statement with several requests for one fingerprint (they
// sort next to each other): one wins, and every one of them is handed the
// whole row, the first as much as the last.
LEDGER_CONFORMANCE(one_fingerprint_in_one_batch, "requests for one fingerprint in one batch all get its whole row") {
  REQUIRE(migrate(backend.config).has_value());
  auto store = open_store(backend);
  std::vector<ReserveRequest> requests;
  for (const char* key : {"k-b", "k-a", "k-c"}) {
    requests.push_back(reserve_request("fp-same", key));
    requests.back().request_snapshot = std::string("{\"from\":\"") + key + "\"}";
  }
  requests.push_back(reserve_request("fp-other", "k-other"));
  std::vector<Result<Reservation>> reserved;
  auto failed = store->batch([&] { reserved = store->reserve_intents(requests); });
  REQUIRE_MESSAGE(!failed, failed.message());
  REQUIRE(reserved.size() == 4);
  for (auto& r : reserved) REQUIRE_MESSAGE(r.has_value(), r.error().message());
  int winners = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    if (reserved[i]->outcome == ReserveOutcome::reserved) ++winners;
    CHECK(reserved[i]->intent.id == reserved[0]->intent.id);
    CHECK(reserved[i]->intent.fingerprint == "fp-same");
    CHECK(reserved[i]->intent.run == "run-1");
    CHECK(reserved[i]->intent.key == reserved[0]->intent.key);
    CHECK(reserved[i]->intent.request_snapshot == "{\"from\":\"" + reserved[0]->intent.key + "\"}");
  }
  CHECK(winners == 1);
  CHECK(reserved[3]->outcome == ReserveOutcome::reserved);
  CHECK(reserved[3]->intent.key == "k-other");
}
