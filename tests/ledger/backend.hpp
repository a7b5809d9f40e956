// Test fixtures for the ledger conformance suite: a fresh database per test
// case (a SQLite file in a new temp dir, or a new PostgreSQL database created
// from IDEMGATE_TEST_PG), SQL access for checks, and a way to run awaitable
// ledger calls from a test body.
#pragma once

#include "ledger/ledger.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <doctest/doctest.h>

#include <future>
#include <memory>
#include <thread>
#include <string>
#include <vector>

namespace idemgate::ledger::test {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // ledger.url and the rest, ready for Ledger::open.
  config::Ledger config;
  // Runs SQL and returns every field of every row as text, one per line.
  virtual std::string query(const std::string& sql) = 0;
  // Every byte the backend has stored (files, or all tables as text).
  virtual std::string dump() = 0;
};

std::unique_ptr<Backend> sqlite_backend();
// FAILs the test (not skips) when IDEMGATE_TEST_PG is not set.
std::unique_ptr<Backend> postgresql_backend();

// Ledger::admit's answer out of its box.
inline Task<Result<Admission>> unboxed(Task<Boxed<Admission>> boxed) {
  auto result = co_await std::move(boxed);
  co_return std::move(*result);
}

// Opens a Ledger on the backend, failing the test when it cannot.
std::unique_ptr<Ledger> open_ledger(Backend& backend, const std::string& replica = "replica-a",
                                    const config::Redact& redact = {});

// A begin_attempt request made from the intent as the ledger holds it now
// (what a verdict would be made from), owned for `lease`.
AttemptRequest attempt_now(Ledger& ledger, std::int64_t intent_id, int max_attempts = 3,
                           Millis lease = std::chrono::minutes(1));
AttemptRequest attempt_now(Store& store, std::int64_t intent_id, int max_attempts = 3,
                           Millis lease = std::chrono::minutes(1));

// Runs one awaitable to completion on its own io_context.
template <class T>
T run(Task<T> operation) {
  boost::asio::io_context io;
  auto result = boost::asio::co_spawn(io, std::move(operation), boost::asio::use_future);
  io.run();
  return result.get();
}

// Runs the awaitables concurrently on one io_context served by `threads`
// threads; results in the order given.
template <class T>
std::vector<T> run_all(std::vector<Task<T>> operations, int threads = 2) {
  boost::asio::io_context io;
  std::vector<std::future<T>> futures;
  for (auto& op : operations)
    futures.push_back(boost::asio::co_spawn(io, std::move(op), boost::asio::use_future));
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back([&] { io.run(); });
  io.run();
  for (auto& t : pool) t.join();
  std::vector<T> results;
  for (auto& f : futures) results.push_back(f.get());
  return results;
}

// The first of the stores the backend's config opens (no migration),
// failing the test when it cannot.
std::unique_ptr<Store> open_store(Backend& backend);
// open_store on a ledger migrated to the latest version first.
std::unique_ptr<Store> migrated_store(Backend& backend);
// A fresh reservation of fingerprint `fp` (key "key-<fp>", run "run-1"): its
// intent id, failing the test when it is refused.
std::int64_t reserve(Store& store, const std::string& fp);

// Attempt `attempt` of intent `id` answered 200 ok with receipt "r-<id>".
Outcome completed(std::int64_t id, int attempt);

ReserveRequest reserve_request(const std::string& fingerprint, const std::string& key,
                               const std::string& run = "run-1");

// An admission of reserve_request(fp, key, run) charged against `budget`,
// its first attempt (of at most 3) leased for a minute.
AdmitRequest admit_request(const std::string& fp, const std::string& key, std::int64_t budget = 100000,
                           const std::string& run = "run-1");

}  // namespace idemgate::ledger::test

// One conformance case, registered once per backend.
#define LEDGER_CONFORMANCE(slug, title)                                              \
  static void slug(::idemgate::ledger::test::Backend& backend);                     \
  TEST_CASE("sqlite: " title) {                                                     \
    auto b = ::idemgate::ledger::test::sqlite_backend();                            \
    slug(*b);                                                                       \
  }                                                                                 \
  TEST_CASE("postgresql: " title * doctest::test_suite("db")) {                    \
    auto b = ::idemgate::ledger::test::postgresql_backend();                        \
    slug(*b);                                                                       \
  }                                                                                 \
  static void slug(::idemgate::ledger::test::Backend& backend)
