// record_after_answer (proxy/outcome_recorder.hpp) over a real SQLite ledger
// file: the caller's view of the settled intent, the pending entry a retry
// meanwhile finds, and the record that lands.
#include "proxy/outcome_recorder.hpp"

#include "ledger/ledger.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>

namespace asio = boost::asio;
namespace ledger = idemgate::ledger;
using namespace std::chrono_literals;

namespace {

// A ledger on a fresh SQLite file under the system's temporary folder,
// removed after.
struct SqliteLedger {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("idemgate-recorder-" + std::to_string(std::random_device{}()));
  std::unique_ptr<ledger::Ledger> opened;
  SqliteLedger() {
    std::filesystem::create_directories(dir);
    idemgate::config::Ledger config;
    config.url = "sqlite:" + (dir / "ledger.db").string();
    auto result = ledger::Ledger::open(config, {}, "replica-a");
    REQUIRE(result.has_value());
    opened = std::move(*result);
  }
  ~SqliteLedger() {
    opened.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

// Runs `body` as a coroutine to its end.
template <class Body>
void run(Body body) {
  asio::io_context ioc;
  asio::co_spawn(ioc, body, [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  ioc.run();
}

}  // namespace

TEST_CASE("record_after_answer: the caller's view is light, the pending entry whole, the record lands") {
  SqliteLedger file;
  auto& l = *file.opened;

  run([&]() -> asio::awaitable<void> {
    ledger::AdmitRequest a;
    a.reserve.run = "run-1";
    a.reserve.tool = "stripe.create_charge";
    a.reserve.scope = "run-1";
    a.reserve.fingerprint = "fp-1";
    a.reserve.key = "key-1";
    a.budget = 10;
    a.first_attempt = ledger::FirstAttempt{2, 30s, {}};
    ledger::RequestSnapshot snap{"POST", "https://api.example.test/v1/charges",
                                 {{"Content-Type", "application/json"}}, R"({"amount":100})"};
    auto admitted_box = co_await l.admit(std::move(a), std::move(snap));
    auto& admitted = *admitted_box;
    REQUIRE(admitted.has_value());
    REQUIRE(admitted->start.has_value());
    auto intent = std::move(admitted->reservation.intent);
    REQUIRE(intent.state == ledger::IntentState::dispatched);
    REQUIRE_FALSE(intent.request_snapshot.empty());
    auto const id = intent.id;
    auto const attempt = admitted->start->attempt;

    ledger::Outcome o;
    o.intent_id = id;
    o.attempt = attempt;
    o.state = ledger::IntentState::completed;
    o.answer_class = "success";
    o.status = 200;
    o.receipt = "ch_1";
    o.response = ledger::StoredResponse{200, {{"Content-Type", "application/json"}}, R"({"id":"ch_1"})", false};
    auto const executor = co_await asio::this_coro::executor;
    auto shown = idemgate::proxy::record_after_answer(executor, l, std::move(o),
                                                      std::chrono::time_point_cast<ledger::Millis>(ledger::Clock::now() + 30s),
                                                      std::move(intent));
    // The caller's view: settled, without the answer it has and the snapshot
    // it never reads.
    CHECK(shown.id == id);
    CHECK(shown.state == ledger::IntentState::completed);
    CHECK(shown.receipt == "ch_1");
    CHECK_FALSE(shown.response.has_value());
    CHECK(shown.request_snapshot.empty());

    // A retry meanwhile finds the whole intent: answer and snapshot.
    // (The record runs on this thread's executor, not before this coroutine
    // suspends: the entry is there.)
    auto pending = idemgate::proxy::pending_outcome(l, id, attempt);
    REQUIRE(pending.has_value());
    CHECK(pending->state == ledger::IntentState::completed);
    REQUIRE(pending->response.has_value());
    CHECK(pending->response->body == R"({"id":"ch_1"})");
    CHECK(pending->request_snapshot.find("api.example.test") != std::string::npos);

    // The record lands with the answer (and leaves the snapshot, written
    // at admission, as it was).
    CHECK(co_await idemgate::proxy::outcome_landed(l, id, attempt, 10s));
    CHECK_FALSE(idemgate::proxy::pending_outcome(l, id, attempt).has_value());
    auto stored = co_await l.find_intent(id);
    REQUIRE(stored.has_value());
    CHECK(stored->state == ledger::IntentState::completed);
    CHECK(stored->request_snapshot.find("api.example.test") != std::string::npos);
    REQUIRE(stored->response.has_value());
    CHECK(stored->response->body == R"({"id":"ch_1"})");
  });
}

namespace {

// Waits (up to 10 s, polling every millisecond) until `ready()`.
template <class Ready>
asio::awaitable<bool> eventually(Ready ready) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (auto const end = std::chrono::steady_clock::now() + 10s; !ready();) {
    if (std::chrono::steady_clock::now() > end) co_return false;
    timer.expires_after(1ms);
    co_await timer.async_wait(asio::use_awaitable);
  }
  co_return true;
}

ledger::Outcome completed_outcome(std::int64_t id) {
  ledger::Outcome o;
  o.intent_id = id;
  o.attempt = 1;
  o.state = ledger::IntentState::completed;
  o.answer_class = "success";
  o.status = 200;
  o.receipt = "ch_9";
  o.response = ledger::StoredResponse{200, {{"Content-Type", "application/json"}}, R"({"id":"ch_9"})", false};
  return o;
}

ledger::Intent dispatched_intent(std::int64_t id);

// Hands attempt 1 of intent `id` (completed, with its answer) to the
// background record, to be tried for `within`.
asio::awaitable<void> hand_over(ledger::Ledger& l, std::int64_t id, std::chrono::milliseconds within) {
  auto executor = co_await asio::this_coro::executor;  // alone: GCC 12 and temporaries beside a co_await
  auto const until = std::chrono::time_point_cast<ledger::Millis>(ledger::Clock::now() + within);
  idemgate::proxy::record_after_answer(executor, l, completed_outcome(id), until, dispatched_intent(id));
}

ledger::Intent dispatched_intent(std::int64_t id) {
  ledger::Intent before;
  before.id = id;
  before.run = "run-1";
  before.tool = "stripe.create_charge";
  before.state = ledger::IntentState::dispatched;
  before.attempts = 1;
  return before;
}

}  // namespace

TEST_CASE("record_after_answer: a record the ledger refuses is tried again until it lands") {
  SqliteLedger file;
  auto& l = *file.opened;
  auto const pending_before = idemgate::proxy::pending_records();

  run([&]() -> asio::awaitable<void> {
    // The outcome of intent 1 comes before intent 1 exists: the ledger
    // answers not_found, and the record backs off (100 ms) and tries again.
    auto const errors = l.stats().errors.load();
    co_await hand_over(l, 1, 30s);
    CHECK(idemgate::proxy::pending_records() == pending_before + 1);
    REQUIRE(co_await eventually([&] { return l.stats().errors.load() > errors; }));
    CHECK(idemgate::proxy::pending_outcome(l, 1, 1).has_value());

    // Now the intent is admitted with its first attempt begun: the next try lands.
    ledger::AdmitRequest a;
    a.reserve.run = "run-1";
    a.reserve.tool = "stripe.create_charge";
    a.reserve.scope = "run-1";
    a.reserve.fingerprint = "fp-9";
    a.reserve.key = "key-9";
    a.budget = 10;
    a.first_attempt = ledger::FirstAttempt{2, 30s, {}};
    ledger::RequestSnapshot snap{"POST", "https://api.example.test/v1/charges", {}, "{}"};
    auto admitted_box = co_await l.admit(std::move(a), std::move(snap));
    auto& admitted = *admitted_box;
    REQUIRE(admitted.has_value());
    REQUIRE(admitted->reservation.intent.id == 1);
    REQUIRE(admitted->start.has_value());

    CHECK(co_await idemgate::proxy::outcome_landed(l, 1, 1, 10s));
    auto stored = co_await l.find_intent(1);
    REQUIRE(stored.has_value());
    CHECK(stored->state == ledger::IntentState::completed);
    CHECK(stored->receipt == "ch_9");
    REQUIRE(stored->response.has_value());
    CHECK(stored->response->body == R"({"id":"ch_9"})");
    CHECK(co_await eventually([&] { return idemgate::proxy::pending_records() == pending_before; }));
  });
}

TEST_CASE("record_after_answer: a record that cannot land is given up when its time is out") {
  SqliteLedger file;
  auto& l = *file.opened;
  auto const pending_before = idemgate::proxy::pending_records();

  run([&]() -> asio::awaitable<void> {
    // No intent 7 ever: tried at once, then after waits of 100, 200, 400 ms;
    // the first try to fail after its second is out is the last: given up
    // (the lease then turns it unknown). A second leaves room for two tries
    // or more on a slow machine.
    auto const errors = l.stats().errors.load();
    co_await hand_over(l, 7, 1s);
    CHECK(idemgate::proxy::pending_outcome(l, 7, 1).has_value());
    CHECK(co_await idemgate::proxy::outcome_landed(l, 7, 1, 10s));  // no longer pending: given up
    CHECK(l.stats().errors.load() >= errors + 2);                   // tried more than once
    CHECK(idemgate::proxy::pending_records() == pending_before);
    auto stored = co_await l.find_intent(7);
    CHECK_FALSE(stored.has_value());
  });
}
