// record_after_answer (proxy/outcome_recorder.hpp) over a real SQLite ledger
// file: the caller's view of the settled intent, the pending entry a retry
// meanwhile finds, and the record that lands.
#include "proxy/outcome_recorder.hpp"

#include "ledger/ledger.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>

#include <chrono>
#include <filesystem>
#include <optional>
#include <random>
#include <string>

namespace asio = boost::asio;
namespace ledger = idemgate::ledger;
using namespace std::chrono_literals;

namespace {

// A fresh ledger file under the system's temporary folder, removed after.
struct LedgerFile {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("idemgate-recorder-" + std::to_string(std::random_device{}()));
  LedgerFile() { std::filesystem::create_directories(dir); }
  ~LedgerFile() {
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
  LedgerFile file;
  idemgate::config::Ledger config;
  config.url = "sqlite:" + (file.dir / "ledger.db").string();
  auto opened = ledger::Ledger::open(config, {}, "replica-a");
  REQUIRE(opened.has_value());
  auto& l = **opened;

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
    auto admitted = co_await l.admit(std::move(a), std::move(snap));
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
