// What a reservation answers is what the ledger stores: every member of a
// fresh intent, from the batch reservation of the store (the rows
// PostgreSQL does not send back are rebuilt from their requests) and from
// the Ledger's batched reservations and admissions.
#include "backend.hpp"
#include "ledger/executor.hpp"

#include <map>
#include <span>

using idemgate::Task;

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

namespace {

// Every member of the intent a reservation returned against the row as a
// later read finds it.
void expect_as_stored(const Intent& got, const Intent& stored) {
  CHECK(got.id == stored.id);
  CHECK(got.run == stored.run);
  CHECK(got.tool == stored.tool);
  CHECK(got.scope == stored.scope);
  CHECK(got.fingerprint == stored.fingerprint);
  CHECK(got.key == stored.key);
  CHECK(got.state == stored.state);
  CHECK(got.answer_class == stored.answer_class);
  CHECK(got.attempts == stored.attempts);
  CHECK(got.waived == stored.waived);
  CHECK(got.status == stored.status);
  CHECK(got.receipt == stored.receipt);
  CHECK(got.response.has_value() == stored.response.has_value());
  CHECK(got.request_snapshot == stored.request_snapshot);
  CHECK(got.window == stored.window);
  CHECK(got.unknown_ttl == stored.unknown_ttl);
  CHECK(got.recovered == stored.recovered);
  CHECK(got.created_at == stored.created_at);
  CHECK(got.updated_at == stored.updated_at);
  CHECK(got.window_until == stored.window_until);
  CHECK(got.unknown_since == stored.unknown_since);
  CHECK(got.retry_not_before == stored.retry_not_before);
  CHECK(got.lease_until == stored.lease_until);
  CHECK(got.looked_up_at == stored.looked_up_at);
}

}  // namespace

LEDGER_CONFORMANCE(reserve_answers_what_is_stored,
                   "reserve_intents answers every fresh intent as the ledger stores it, field by field") {
  auto store = migrated_store(backend);
  // A batch of different runs, tools, scopes, windows and leases, with and
  // without a start, and a fingerprint asked for twice.
  auto request = [](std::string fp, std::string key, std::string run, std::string tool, std::string scope,
                    Millis window, Millis ttl, std::optional<Millis> lease) {
    auto r = reserve_request(fp, key);
    r.run = std::move(run);
    r.tool = std::move(tool);
    r.scope = std::move(scope);
    r.window = window;
    r.unknown_ttl = ttl;
    r.request_snapshot = "{\"snapshot\":\"" + key + "\"}";
    if (lease) r.start = ReserveRequest::Start{*lease, "replica-f"};
    return r;
  };
  std::vector<ReserveRequest> requests{
      request("f-1", "k-1", "run-f", "charge", "run-f", Millis(86400000), Millis(900000), Millis(45000)),
      request("f-2", "k-2", "run-g", "ticket", "", Millis(1500), Millis(60000), std::nullopt),
      // The same scope and fingerprint asked again, differently: the first asked wins.
      request("f-1", "k-3", "run-x", "charge-2", "run-f", Millis(5000), Millis(1000), Millis(1000)),
      request("f-1", "k-4", "run-h", "refund", "run-h", Millis(7000), Millis(1000), Millis(2500)),
      request("f-3", "k-5", "run-g", "ticket", "", Millis(123457), Millis(60001), Millis(999))};
  auto results = store->reserve_intents(requests);
  REQUIRE(results.size() == requests.size());
  int fresh = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    REQUIRE_MESSAGE(results[i].has_value(), results[i].error().message());
    const auto& r = requests[i];
    const auto& got = results[i]->intent;
    if (i == 2) {  // the same scope and fingerprint as the first: existing
      CHECK(results[i]->outcome == ReserveOutcome::existing);
      CHECK(!results[i]->started);
      CHECK(got.id == results[0]->intent.id);
      CHECK(got.key == "k-1");
      CHECK(got.run == "run-f");
      CHECK(got.tool == "charge");
      CHECK(got.request_snapshot == requests[0].request_snapshot);
      CHECK(got.window == requests[0].window);
      continue;
    }
    CAPTURE(i);
    REQUIRE(results[i]->outcome == ReserveOutcome::reserved);
    ++fresh;
    CHECK(results[i]->started == r.start.has_value());
    auto stored = store->find_intent(got.id);
    REQUIRE_MESSAGE(stored.has_value(), stored.error().message());
    CHECK(got.run == r.run);
    CHECK(got.key == r.key);
    expect_as_stored(got, *stored);
    CHECK(got.window_until - got.created_at == r.window);
    // The lease runs from the moment the reservation set it (on PostgreSQL
    // the clock once the lease lock is held), never from before its intent.
    if (r.start) CHECK(*got.lease_until - got.created_at >= r.start->lease);
  }
  CHECK(fresh == 4);
}

LEDGER_CONFORMANCE(reserved_as_stored, "a batch's reservations and admissions return their intents as stored") {
  auto ledger = open_ledger(backend);
  // Concurrent callers, so that the workers batch them: plain reservations,
  // and admissions whose first attempt begins with the reservation.
  std::vector<Task<Result<Reservation>>> reservations;
  for (int i = 0; i < 24; ++i)
    reservations.push_back(ledger->reserve_intent(reserve_request("as-r-" + std::to_string(i), "kr-" + std::to_string(i)),
                                                  RequestSnapshot{"POST", "/r", {{"Content-Type", "application/json"}},
                                                                  R"({"n":)" + std::to_string(i) + "}"}));
  auto reserved = run_all(std::move(reservations), 8);
  std::vector<Task<Result<Admission>>> admissions;
  for (int i = 0; i < 24; ++i)
    admissions.push_back(unboxed(ledger->admit(admit_request("as-a-" + std::to_string(i), "ka-" + std::to_string(i)),
                                       RequestSnapshot{"POST", "/a", {}, "plain " + std::to_string(i)})));
  auto admitted = run_all(std::move(admissions), 8);
  int started = 0;
  for (const auto& r : reserved) {
    REQUIRE_MESSAGE(r.has_value(), r.error().message());
    CHECK(r->outcome == ReserveOutcome::reserved);
    auto stored = run(ledger->find_intent(r->intent.id));
    REQUIRE(stored.has_value());
    expect_as_stored(r->intent, *stored);
  }
  for (const auto& a : admitted) {
    REQUIRE_MESSAGE(a.has_value(), a.error().message());
    REQUIRE(a->start.has_value());
    started += a->start->outcome == AttemptOutcome::started;
    auto stored = run(ledger->find_intent(a->reservation.intent.id));
    REQUIRE(stored.has_value());
    expect_as_stored(a->reservation.intent, *stored);
  }
  CHECK(started == 24);
  MESSAGE(backend.name() << ": " << ledger->stats().reserve_batches.load() << " reservation transactions for 48 calls");
}

LEDGER_CONFORMANCE(first_asked_wins_large_batch,
                   "in a batch of any size, the first request for a fingerprint is the one reserved") {
  auto store = migrated_store(backend);
  // 21 fingerprints asked three times each (63 requests: past the size
  // below which a sort is an insertion sort, stable whatever it is),
  // interleaved so that each fingerprint's requests lie far apart, and
  // each one's first request is not the first in any other order.
  std::vector<ReserveRequest> requests;
  for (int round = 0; round < 3; ++round)
    for (int f = 0; f < 21; ++f) {
      auto const fp = "fw-" + std::to_string(round % 2 ? 20 - f : f);
      auto r = reserve_request(fp, "kw-" + std::to_string(round) + "-" + fp, "run-w" + std::to_string(round));
      r.request_snapshot = "{\"round\":" + std::to_string(round) + "}";
      r.scope = "";  // one scope (the global one) for every run: the runs' requests collide
      requests.push_back(std::move(r));
    }
  auto results = store->reserve_intents(requests);
  REQUIRE(results.size() == requests.size());
  std::map<std::string, std::size_t> first;  // fingerprint -> the index that asked first
  for (std::size_t i = 0; i < requests.size(); ++i) first.try_emplace(requests[i].fingerprint, i);
  int reserved = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    CAPTURE(i);
    REQUIRE_MESSAGE(results[i].has_value(), results[i].error().message());
    auto const winner = first.at(requests[i].fingerprint);
    const auto& got = results[i]->intent;
    CHECK(got.key == requests[winner].key);
    CHECK(got.run == requests[winner].run);
    CHECK(got.request_snapshot == requests[winner].request_snapshot);
    CHECK(got.id == results[winner]->intent.id);
    if (i == winner) {
      CHECK(results[i]->outcome == ReserveOutcome::reserved);
      ++reserved;
      auto stored = store->find_intent(got.id);
      REQUIRE(stored.has_value());
      expect_as_stored(got, *stored);
    } else {
      CHECK(results[i]->outcome == ReserveOutcome::existing);
    }
  }
  CHECK(reserved == 21);
}

LEDGER_CONFORMANCE(superseding_reservation_as_stored,
                   "a reservation that supersedes a passed window, and one in a batch, answer as stored") {
  auto store = migrated_store(backend);
  // A window of 0 ms has passed for any later transaction.
  auto old_request = reserve_request("fs-1", "ks-old", "run-s");
  old_request.window = Millis(0);
  auto old = store->reserve_intents(std::span(&old_request, 1));
  REQUIRE(old.size() == 1);
  REQUIRE_MESSAGE(old[0].has_value(), old[0].error().message());
  REQUIRE(old[0]->outcome == ReserveOutcome::reserved);

  std::vector<ReserveRequest> requests;
  auto again = reserve_request("fs-1", "ks-new", "run-t");  // takes fs-1 over
  again.tool = "refund";
  again.window = Millis(3000);
  again.unknown_ttl = Millis(7000);
  again.request_snapshot = R"({"again":true})";
  again.start = ReserveRequest::Start{Millis(4500), "replica-s"};
  requests.push_back(again);
  auto fresh = reserve_request("fs-2", "ks-fresh", "run-t");
  fresh.request_snapshot = R"({"fresh":true})";
  requests.push_back(fresh);

  // In a batch (one transaction with a savepoint per call), as the Ledger
  // runs them.
  std::vector<Result<Reservation>> results;
  auto committed = store->batch([&] { results = store->reserve_intents(requests); });
  REQUIRE_MESSAGE(!committed, committed.message());
  REQUIRE(results.size() == 2);
  for (std::size_t i = 0; i < results.size(); ++i) {
    CAPTURE(i);
    REQUIRE_MESSAGE(results[i].has_value(), results[i].error().message());
    CHECK(results[i]->outcome == ReserveOutcome::reserved);
    const auto& got = results[i]->intent;
    CHECK(got.key == requests[i].key);
    auto stored = store->find_intent(got.id);
    REQUIRE(stored.has_value());
    expect_as_stored(got, *stored);
    CHECK(got.window_until - got.created_at == requests[i].window);
  }
  CHECK(results[0]->intent.id != old[0]->intent.id);
  CHECK(results[0]->started);
  CHECK(*results[0]->intent.lease_until - results[0]->intent.created_at >= Millis(4500));  // from when it was set
  auto before = store->find_intent(old[0]->intent.id);
  REQUIRE(before.has_value());
  CHECK(before->key == "ks-old");  // still there, no longer live
}
