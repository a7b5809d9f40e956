// Helpers of the PostgreSQL plan, reservation and lease-sweep tests
// (plans_test.cpp, fresh_reserve_test.cpp, lease_sweep_test.cpp): the
// server's statistics and lock waits polled with a deadline, a migrated
// ledger's store sessions, a batch held open on a thread of its own, and
// intents reserved with their first attempt begun.
#pragma once

#include "backend.hpp"

#include "ledger/migrations.hpp"
#include "ledger/open_store.hpp"

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace idemgate::ledger::test {

// Polls `sql` until its answer satisfies `done`, or 10 s pass; the last answer.
template <class Done>
std::string poll_until(Backend& backend, const std::string& sql, Done done) {
  std::string now;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    now = backend.query(sql);
    if (done(now)) break;
  }
  return now;
}

inline std::string changed_from(Backend& backend, const std::string& sql, const std::string& before) {
  return poll_until(backend, sql, [&](const std::string& now) { return now != before; });
}

inline std::string reaches(Backend& backend, const std::string& sql, const std::string& want) {
  return poll_until(backend, sql, [&](const std::string& now) { return now == want; });
}

// How many sessions of the test's database wait for a lock, once `want`
// do (or after the deadline).
inline std::string lock_waits(Backend& backend, const std::string& want) {
  return reaches(backend,
                 "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                 "AND wait_event_type = 'Lock'",
                 want);
}

// The intents no transaction holds (SKIP LOCKED passes over the others).
inline std::string free_intents(Backend& backend) {
  return backend.query(
      "SELECT string_agg(id::text, ',' ORDER BY id) FROM (SELECT id FROM intents FOR UPDATE SKIP LOCKED) f");
}

// The sessions of a migrated ledger's store pool (`at_least` of them): one
// for the call under test, others to hold transactions open beside it.
inline std::vector<std::unique_ptr<Store>> sessions(Backend& backend, std::size_t at_least = 2) {
  REQUIRE(migrate(backend.config).has_value());
  auto stores = open_stores(backend.config);
  REQUIRE_MESSAGE(stores.has_value(), stores.error().message());
  REQUIRE(stores->size() >= at_least);
  return std::move(*stores);
}

// Runs `body` in a batch of `store` on a thread of its own and keeps that
// transaction open, its locks held, until release() (or the end of the
// scope); the batch commits then.
class HeldBatch {
 public:
  template <class Body>
  HeldBatch(Store& store, Body body)
      : thread_([this, &store, body] {
          store.batch(
              [&] {
                body();
                opened_.set_value();
                released_.get_future().wait();
              },
              Store::Calls::together);
        }) {
    opened_.get_future().wait();
  }
  HeldBatch(const HeldBatch&) = delete;
  HeldBatch& operator=(const HeldBatch&) = delete;
  ~HeldBatch() { release(); }
  void release() {
    if (!thread_.joinable()) return;
    released_.set_value();
    thread_.join();
  }

 private:
  std::promise<void> opened_, released_;
  std::thread thread_;  // last: started once the promises exist
};

// A fresh intent reserved with its first attempt begun with the reservation
// (replica-a, `lease`): the reservation, as the store answered it.
inline Reservation reserve_started(Store& store, const std::string& fp, Millis lease = Millis(60000)) {
  auto request = reserve_request(fp, "key-" + fp);
  request.start = ReserveRequest::Start{lease, "replica-a"};
  auto r = store.reserve_intents({&request, 1}).front();
  REQUIRE_MESSAGE(r.has_value(), r.error().message());
  return std::move(*r);
}

// An intent reserved, then its first attempt begun apart, with a row of its
// own (replica-a, `lease`): its id.
inline std::int64_t begin_apart(Store& store, const std::string& fp, Millis lease = Millis(0)) {
  auto const id = reserve(store, fp);
  auto begun = store.begin_attempt(AttemptRequest{id, IntentState::reserved, 0, 3, lease}, "replica-a");
  REQUIRE(begun.has_value());
  REQUIRE(begun->outcome == AttemptOutcome::started);
  return id;
}

}  // namespace idemgate::ledger::test
