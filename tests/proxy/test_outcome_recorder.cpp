// record_after_answer and record_outcome (proxy/outcome_recorder.hpp) over
// a real SQLite ledger file: the caller's view of the settled intent, the
// pending entry a retry meanwhile finds, the record that lands, is given up
// or is dropped past the bound, the background's backoff, and the log lines
// an operator reads of each.
#include "proxy/outcome_recorder.hpp"

#include "ledger/ledger.hpp"
#include "proxy/log.hpp"
#include "ledger/executor.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json/parse.hpp>

#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

using idemgate::Task;
using idemgate::use_task;
using idemgate::SteadyTimer;

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

// Runs `body` as a coroutine to its end, and the io_context until nothing
// is left on it (records still trying after a failed REQUIRE included), so
// that it outlives them; then rethrows what ended `body`.
template <class Body>
void run(Body body) {
  asio::io_context ioc;
  std::exception_ptr failed;
  asio::co_spawn(ioc, body, [&failed](std::exception_ptr e) { failed = e; });
  ioc.run();
  if (failed) std::rethrow_exception(failed);
}

// The log's lines (stderr) while it lives: file descriptor 2 points at a
// file of its own meanwhile. What else is written there goes back to the
// real stderr at the end. A report that ends the process cannot: ASan's
// is sent to the real stderr meanwhile, and the file's path is told there
// first, so anything else (UBSan's) is found in it.
class LogCapture {
 public:
  LogCapture() {
    idemgate::proxy::log_flush();  // earlier lines go where they were going
    fd_ = ::mkstemp(path_.data());
    REQUIRE(fd_ >= 0);
    saved_ = ::dup(STDERR_FILENO);
    std::string const told = "(stderr captured in " + path_ + " while the log is read)\n";
    [[maybe_unused]] auto const written = ::write(saved_, told.data(), told.size());
    report_to(saved_);
    REQUIRE(::dup2(fd_, STDERR_FILENO) == STDERR_FILENO);
  }
  ~LogCapture() {
    idemgate::proxy::log_flush();
    ::dup2(saved_, STDERR_FILENO);
    report_to(STDERR_FILENO);
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);)
      if (!parsed(line)) {
        line += '\n';
        [[maybe_unused]] auto const written = ::write(saved_, line.data(), line.size());
      }
    ::close(saved_);
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // The lines of `event` written so far, each as its JSON object.
  std::vector<boost::json::object> events(std::string_view event) {
    idemgate::proxy::log_flush();
    std::ifstream in(path_);
    std::vector<boost::json::object> out;
    for (std::string line; std::getline(in, line);) {
      auto value = parsed(line);
      if (!value) continue;
      auto const* name = value->if_contains("event");
      if (name && name->is_string() && name->as_string() == event) out.push_back(std::move(*value));
    }
    return out;
  }

 private:
  static void report_to([[maybe_unused]] int fd) {
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_set_report_fd(reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)));
#endif
  }

  // A log line as its object; nullopt for anything else.
  static std::optional<boost::json::object> parsed(const std::string& line) {
    boost::system::error_code ec;
    auto value = boost::json::parse(line, ec);
    if (ec || !value.is_object()) return std::nullopt;
    return std::move(value.as_object());
  }

  std::string path_ = (std::filesystem::temp_directory_path() / "idemgate-recorder-log-XXXXXX").string();
  int fd_ = -1;
  int saved_ = -1;
};

// A fresh ledger, the log captured, and the records pending before.
struct Recording {
  SqliteLedger file;
  ledger::Ledger& l = *file.opened;
  LogCapture log;
  int const pending_before = idemgate::proxy::pending_records();
};

// An admission of a charge (fingerprint `fp`, key `key`) with its first
// attempt begun.
ledger::AdmitRequest charge_admission(const std::string& fp, const std::string& key) {
  ledger::AdmitRequest a;
  a.reserve.run = "run-1";
  a.reserve.tool = "stripe.create_charge";
  a.reserve.scope = "run-1";
  a.reserve.fingerprint = fp;
  a.reserve.key = key;
  a.budget = 10;
  a.first_attempt = ledger::FirstAttempt{2, 30s, {}};
  return a;
}

// Admits a charge (charge_admission) with a small snapshot: its intent's id.
Task<std::int64_t> admit_charge(ledger::Ledger& l, const std::string& fp, const std::string& key) {
  // Each on its own line: GCC 12 and temporaries beside a co_await.
  auto request = charge_admission(fp, key);
  ledger::RequestSnapshot snap{"POST", "https://api.example.test/v1/charges", {}, "{}"};
  auto admitted_box = co_await l.admit(std::move(request), std::move(snap));
  auto& admitted = *admitted_box;
  REQUIRE(admitted.has_value());
  REQUIRE(admitted->start.has_value());
  co_return admitted->reservation.intent.id;
}

}  // namespace

TEST_CASE("record_after_answer: the caller's view is light, the pending entry whole, the record lands") {
  SqliteLedger file;
  auto& l = *file.opened;

  run([&]() -> Task<void> {
    auto a = charge_admission("fp-1", "key-1");
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
Task<bool> eventually(Ready ready) {
  SteadyTimer timer(co_await asio::this_coro::executor);
  for (auto const end = std::chrono::steady_clock::now() + 10s; !ready();) {
    if (std::chrono::steady_clock::now() > end) co_return false;
    timer.expires_after(1ms);
    co_await timer.async_wait(use_task);
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
Task<void> hand_over(ledger::Ledger& l, std::int64_t id, std::chrono::milliseconds within) {
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

  run([&]() -> Task<void> {
    // The outcome of intent 1 comes before intent 1 exists: the ledger
    // answers not_found, and the record backs off (100 ms) and tries again.
    auto const errors = l.stats().errors.load();
    co_await hand_over(l, 1, 30s);
    CHECK(idemgate::proxy::pending_records() == pending_before + 1);
    REQUIRE(co_await eventually([&] { return l.stats().errors.load() > errors; }));
    CHECK(idemgate::proxy::pending_outcome(l, 1, 1).has_value());

    // Now the intent is admitted with its first attempt begun: the next try lands.
    CHECK(co_await admit_charge(l, "fp-9", "key-9") == 1);

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

TEST_CASE_FIXTURE(Recording, "record_after_answer: a record that cannot land is given up when its time is out") {
  run([&]() -> Task<void> {
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
  // Told once, with what an operator needs: which attempt, how often it was
  // tried, why it failed, and what becomes of it.
  auto const lost = log.events("ledger_record_lost");
  REQUIRE(lost.size() == 1);
  CHECK(lost[0].at("intent") == 7);
  CHECK(lost[0].at("attempt") == 1);
  CHECK(lost[0].at("tries").to_number<int>() >= 2);
  CHECK_FALSE(lost[0].at("error").as_string().empty());
  CHECK(std::string_view(lost[0].at("detail").as_string()).find("unknown") != std::string_view::npos);
  CHECK(log.events("ledger_record_landed").empty());
}

TEST_CASE_FIXTURE(Recording, "record_outcome: three tries on the request path, then the background's from the fourth, logged") {
  run([&]() -> Task<void> {
    // Intent 1 does not exist yet: every try is refused (not_found).
    auto const errors = l.stats().errors.load();
    auto const until = std::chrono::time_point_cast<ledger::Millis>(ledger::Clock::now() + 10s);
    auto const began = std::chrono::steady_clock::now();
    auto recorded = co_await idemgate::proxy::record_outcome(l, completed_outcome(1), until);
    CHECK_FALSE(recorded.has_value());
    CHECK(l.stats().errors.load() == errors + 3);
    CHECK(idemgate::proxy::pending_records() == pending_before + 1);
    // No answer was given yet: nothing for a retry to be shown.
    CHECK_FALSE(idemgate::proxy::pending_outcome(l, 1, 1).has_value());
    auto const retry = log.events("ledger_record_retry");
    REQUIRE(retry.size() == 1);
    CHECK(retry[0].at("intent") == 1);
    CHECK(retry[0].at("attempt") == 1);
    CHECK(retry[0].at("class") == "success");
    CHECK(retry[0].at("pending") == pending_before + 1);

    // The background's first try (the fourth) comes after the backoffs
    // before the second, third and fourth tries, 100 + 200 + 400 ms (a timer
    // never fires early), and fails too.
    REQUIRE(co_await eventually([&] { return l.stats().errors.load() > errors + 3; }));
    CHECK(std::chrono::steady_clock::now() - began >= 700ms);

    // The intent exists now: a later try lands, told with its count.
    CHECK(co_await admit_charge(l, "fp-r", "key-r") == 1);
    REQUIRE(co_await eventually([&] { return idemgate::proxy::pending_records() == pending_before; }));
    auto stored = co_await l.find_intent(1);
    REQUIRE(stored.has_value());
    CHECK(stored->state == ledger::IntentState::completed);
    CHECK(stored->receipt == "ch_9");
  });
  auto const landed = log.events("ledger_record_landed");
  REQUIRE(landed.size() == 1);
  CHECK(landed[0].at("intent") == 1);
  CHECK(landed[0].at("attempt") == 1);
  CHECK(landed[0].at("result") == "recorded");
  CHECK(landed[0].at("tries").to_number<int>() >= 5);  // three, at least one in the background, then the one that landed
  CHECK(log.events("ledger_record_lost").empty());
}

TEST_CASE_FIXTURE(Recording, "record_after_answer: past the bound, the newest record is dropped, logged, and shown to no retry") {
  REQUIRE(pending_before < idemgate::proxy::kMaxPendingRecords);

  run([&]() -> Task<void> {
    // Records that cannot land (no such intents), each tried for 300 ms.
    // Nothing completes while this loop runs (it never suspends), so the
    // count only grows.
    auto const room = idemgate::proxy::kMaxPendingRecords - pending_before;
    for (int i = 0; i < room; ++i) co_await hand_over(l, 1000 + i, 300ms);
    CHECK(idemgate::proxy::pending_records() == idemgate::proxy::kMaxPendingRecords);
    co_await hand_over(l, 999, 300ms);  // one too many
    CHECK(idemgate::proxy::pending_records() == idemgate::proxy::kMaxPendingRecords);
    // The dropped one leaves no pending entry behind (a retry reads the
    // ledger: the attempt still in flight, then unknown by its lease); the
    // others keep theirs.
    CHECK_FALSE(idemgate::proxy::pending_outcome(l, 999, 1).has_value());
    CHECK(idemgate::proxy::pending_outcome(l, 1000, 1).has_value());
    CHECK(idemgate::proxy::pending_outcome(l, 1000 + room - 1, 1).has_value());
    // CHECKs only until every record has ended: they run on this
    // io_context, which must outlive them.
    auto const dropped = log.events("ledger_record_dropped");
    CHECK(dropped.size() == 1);
    if (!dropped.empty()) {
      CHECK(dropped[0].at("what") == "record_outcome");
      CHECK(dropped[0].at("pending") == idemgate::proxy::kMaxPendingRecords);
    }

    // Then every one is given up in its time, and the count comes back.
    SteadyTimer timer(co_await asio::this_coro::executor);
    for (auto const end = std::chrono::steady_clock::now() + 60s;
         idemgate::proxy::pending_records() != pending_before && std::chrono::steady_clock::now() < end;) {
      timer.expires_after(5ms);
      co_await timer.async_wait(use_task);
    }
    CHECK(idemgate::proxy::pending_records() == pending_before);
    CHECK_FALSE(idemgate::proxy::pending_outcome(l, 1000, 1).has_value());
  });
}
