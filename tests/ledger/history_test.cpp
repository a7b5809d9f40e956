// The history of a first attempt begun with its reservation (schema version
// 12): answered, it stays on its intent, with no attempts row; whatever
// changes that intent afterwards (a second attempt, alone or with others, a
// refusal without an attempt, an operator's resolution) first writes its row
// from the intent, as the attempt ended. attempt_history shows every
// attempt, either kind, once; dash_duplicate_receipts still sees two
// attempts' receipts.
#include "backend.hpp"
#include "pg_sessions.hpp"

#include <libpq-fe.h>

#include <future>

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

namespace {

// A fresh intent reserved with its first attempt begun (replica-a): its id.
std::int64_t started(Store& store, const std::string& fp) {
  auto request = reserve_request(fp, "key-" + fp);
  request.start = ReserveRequest::Start{Millis(60000), "replica-a"};
  auto r = store.reserve_intents({&request, 1}).front();
  REQUIRE_MESSAGE(r.has_value(), r.error().message());
  REQUIRE(r->started);
  return r->intent.id;
}

// The first attempt of intent `id` answered retryable (503), with a receipt.
void answer_retryable(Store& store, std::int64_t id, const std::string& receipt = "ch_first") {
  Outcome o;
  o.intent_id = id;
  o.attempt = 1;
  o.state = IntentState::retryable;
  o.answer_class = "transient";
  o.status = 503;
  o.receipt = receipt;
  auto settled = store.record_outcome(o);
  REQUIRE_MESSAGE(settled.has_value(), settled.error().message());
  REQUIRE(settled->state == IntentState::retryable);
}

// A refusal of intent `id` before a dispatch: denied, no attempt of its own.
Outcome refusal(std::int64_t id) {
  Outcome o;
  o.intent_id = id;
  o.attempt = 0;
  o.state = IntentState::denied;
  o.answer_class = "validation";
  o.status = 422;
  return o;
}

std::string text(std::int64_t id) { return std::to_string(id); }

// The first attempt's row, as its number, replica, state, class, status and
// receipt, and whether its times are those its outcome left on the intent
// (`finished`: the intent's updated_at then, as text).
std::string first_row(Backend& backend, std::int64_t id, const std::string& finished) {
  auto row = backend.query("SELECT number || ' ' || replica_id || ' ' || state || ' ' || answer_class || ' ' || "
                           "status || ' ' || receipt FROM attempts WHERE number = 1 AND intent_id = " + text(id));
  CHECK(backend.query("SELECT finished_at FROM attempts WHERE number = 1 AND intent_id = " + text(id)) == finished);
  CHECK(backend.query("SELECT count(*) FROM attempts a JOIN intents i ON i.id = a.intent_id WHERE a.number = 1 "
                      "AND a.started_at = i.created_at AND NOT a.recovered AND a.intent_id = " + text(id)) == "1\n");
  return row;
}

std::string updated_at(Backend& backend, std::int64_t id) {
  return backend.query("SELECT updated_at FROM intents WHERE id = " + text(id));
}

}  // namespace

LEDGER_CONFORMANCE(history_on_intent, "an answered first attempt stays on its intent and attempt_history shows it") {
  auto store = migrated_store(backend);
  auto const id = started(*store, "h-1");
  REQUIRE(store->record_outcome(completed(id, 1)).has_value());
  CHECK(backend.query("SELECT count(*) FROM attempts") == "0\n");
  CHECK(backend.query("SELECT number || ' ' || replica_id || ' ' || state || ' ' || answer_class || ' ' || status || "
                      "' ' || receipt FROM attempt_history") == "1 replica-a answered ok 200 r-" + text(id) + "\n");
  CHECK(backend.query("SELECT count(*) FROM attempt_history a JOIN intents i ON i.id = a.intent_id "
                      "WHERE a.started_at = i.created_at AND a.finished_at = i.updated_at "
                      "AND a.lease_until = i.lease_until AND NOT a.recovered") == "1\n");
  // In flight, it is in the history too: dispatched, its lease, no finish.
  auto const unknown = started(*store, "h-2");
  CHECK(backend.query("SELECT number || ' ' || replica_id || ' ' || state || ' ' || answer_class || ' ' || "
                      "coalesce(status, 0) || ' ' || receipt || ' ' || CASE WHEN finished_at IS NULL THEN 'open' "
                      "ELSE 'ended' END FROM attempt_history WHERE intent_id = " + text(unknown)) ==
        "1 replica-a dispatched  0  open\n");
  CHECK(backend.query("SELECT count(*) FROM attempt_history a JOIN intents i ON i.id = a.intent_id "
                      "WHERE a.started_at = i.created_at AND a.lease_until = i.lease_until AND NOT a.recovered "
                      "AND a.intent_id = " + text(unknown)) == "1\n");
  // Unknown, it has its row at once (what reconciles it updates that row).
  auto lost = completed(unknown, 1);
  lost.state = IntentState::unknown;
  lost.answer_class = "timeout";
  lost.status.reset();
  lost.receipt.clear();
  REQUIRE(store->record_outcome(lost).has_value());
  CHECK(backend.query("SELECT number || ' ' || replica_id || ' ' || state FROM attempts WHERE intent_id = " +
                      text(unknown)) == "1 replica-a unknown\n");
  auto late = completed(unknown, 1);
  REQUIRE(store->record_outcome(late).has_value());
  CHECK(backend.query("SELECT state || ' ' || receipt FROM attempts WHERE intent_id = " + text(unknown)) ==
        "answered r-" + text(unknown) + "\n");
  CHECK(backend.query("SELECT count(*) FROM attempt_history") == "2\n");
}

LEDGER_CONFORMANCE(history_retry, "a retry writes the first attempt's row from its intent before it begins") {
  auto store = migrated_store(backend);
  auto const id = started(*store, "h-3");
  answer_retryable(*store, id);
  auto const finished = updated_at(backend, id);
  auto second = store->begin_attempt(AttemptRequest{id, IntentState::retryable, 1, 3, Millis(60000)}, "replica-b");
  REQUIRE_MESSAGE(second.has_value(), second.error().message());
  REQUIRE(second->outcome == AttemptOutcome::started);
  CHECK(second->attempt == 2);
  CHECK(first_row(backend, id, finished) == "1 replica-a answered transient 503 ch_first\n");
  CHECK(backend.query("SELECT number || ' ' || replica_id || ' ' || state FROM attempts WHERE number = 2") ==
        "2 replica-b dispatched\n");
  // A second receipt for the same key: the dashboards see both attempts'.
  auto done = completed(id, 2);
  done.receipt = "ch_second";
  REQUIRE(store->record_outcome(done).has_value());
  auto signals = store->read_signals(TimePoint{});
  REQUIRE_MESSAGE(signals.has_value(), signals.error().message());
  CHECK(signals->duplicate_receipts == 1);
  CHECK(backend.query("SELECT count(*) FROM attempt_history") == "2\n");
}

LEDGER_CONFORMANCE(history_retry_batch, "retries begun together write the first attempts' rows they need, once") {
  auto store = migrated_store(backend);
  // Two answered first attempts kept on their intents, and one begun apart
  // (a row from the start).
  auto const a = started(*store, "h-4");
  auto const b = started(*store, "h-5");
  auto const apart = reserve(*store, "h-6");
  REQUIRE(store->begin_attempt(AttemptRequest{apart, IntentState::reserved, 0, 3, Millis(60000)}, "replica-c")
              ->outcome == AttemptOutcome::started);
  for (auto id : {a, b, apart}) answer_retryable(*store, id, "ch_" + text(id));
  auto const finished_a = updated_at(backend, a), finished_b = updated_at(backend, b);
  std::vector<AttemptRequest> retries;
  for (auto id : {a, b, apart}) retries.push_back(AttemptRequest{id, IntentState::retryable, 1, 3, Millis(60000)});
  std::vector<Result<AttemptStart>> begun;
  REQUIRE_FALSE(store->batch([&] { begun = store->begin_attempts(retries, "replica-b"); }));
  REQUIRE(begun.size() == 3);
  for (auto& r : begun) {
    REQUIRE_MESSAGE(r.has_value(), r.error().message());
    CHECK(r->outcome == AttemptOutcome::started);
    CHECK(r->attempt == 2);
  }
  CHECK(first_row(backend, a, finished_a) == "1 replica-a answered transient 503 ch_" + text(a) + "\n");
  CHECK(first_row(backend, b, finished_b) == "1 replica-a answered transient 503 ch_" + text(b) + "\n");
  CHECK(backend.query("SELECT number || ' ' || replica_id || ' ' || state FROM attempts WHERE intent_id = " +
                      text(apart) + " ORDER BY number") == "1 replica-c answered\n2 replica-b dispatched\n");
  CHECK(backend.query("SELECT count(*) FROM attempts") == "6\n");
  CHECK(backend.query("SELECT count(*) FROM attempt_history") == "6\n");
}

LEDGER_CONFORMANCE(history_refusal, "a refusal of a retryable intent keeps its first attempt as it ended") {
  auto store = migrated_store(backend);
  auto const id = started(*store, "h-7");
  answer_retryable(*store, id);
  auto const finished = updated_at(backend, id);
  auto denied = store->record_outcome(refusal(id));
  REQUIRE_MESSAGE(denied.has_value(), denied.error().message());
  CHECK(denied->state == IntentState::denied);
  CHECK(denied->answer_class == "validation");
  CHECK(first_row(backend, id, finished) == "1 replica-a answered transient 503 ch_first\n");
  CHECK(backend.query("SELECT count(*) FROM attempt_history") == "1\n");
}

LEDGER_CONFORMANCE(history_resolution, "an operator's resolution keeps the first attempt as it ended") {
  auto store = migrated_store(backend);
  for (auto resolution : {Resolution::complete, Resolution::deny}) {
    auto const id = started(*store, resolution == Resolution::complete ? "h-8" : "h-9");
    answer_retryable(*store, id, "");
    auto const finished = updated_at(backend, id);
    auto escalation = store->persist_escalation(EscalationRequest{"run-1", id, "retries_exhausted", "{}"});
    REQUIRE_MESSAGE(escalation.has_value(), escalation.error().message());
    auto resolved = store->resolve_escalation(ResolveRequest{*escalation, resolution, "ch_operator", "checked"});
    REQUIRE_MESSAGE(resolved.has_value(), resolved.error().message());
    CHECK(first_row(backend, id, finished) == "1 replica-a answered transient 503 \n");
    CHECK(backend.query("SELECT state FROM intents WHERE id = " + text(id)) ==
          (resolution == Resolution::complete ? "completed\n" : "denied\n"));
  }
  CHECK(backend.query("SELECT count(*) FROM attempt_history") == "2\n");
}

// Two replicas retrying one answered first attempt at once: both write its
// row, the second waits for the first's and writes nothing, and only one
// begins the retry.
TEST_CASE("postgresql: two retries at once write the first attempt's row once" * doctest::test_suite("db")) {
  auto backend = postgresql_backend();
  auto stores = sessions(*backend, 2);
  auto const id = started(*stores[0], "h-10");
  answer_retryable(*stores[0], id);
  auto const retry = AttemptRequest{id, IntentState::retryable, 1, 3, Millis(60000)};
  std::optional<Result<AttemptStart>> held;
  HeldBatch first(*stores[0], [&] { held = stores[0]->begin_attempt(retry, "replica-a"); });
  auto second = std::async(std::launch::async, [&] { return stores[1]->begin_attempt(retry, "replica-b"); });
  CHECK(lock_waits(*backend, "1\n") == "1\n");  // on the first's row, not yet committed
  first.release();
  auto other = second.get();
  REQUIRE(held.has_value());
  REQUIRE_MESSAGE(held->has_value(), held->error().message());
  CHECK((*held)->outcome == AttemptOutcome::started);
  REQUIRE_MESSAGE(other.has_value(), other.error().message());
  CHECK(other->outcome != AttemptOutcome::started);
  CHECK(backend->query("SELECT number || ' ' || replica_id || ' ' || state FROM attempts ORDER BY number") ==
        "1 replica-a answered\n2 replica-a dispatched\n");
}

// A session of the test's database of its own, outside any store: a
// transaction held between two statements of a writer.
class RawSession {
 public:
  explicit RawSession(const std::string& url) : c_(PQconnectdb(url.c_str())) {
    REQUIRE(PQstatus(c_) == CONNECTION_OK);
  }
  ~RawSession() { PQfinish(c_); }
  RawSession(const RawSession&) = delete;
  RawSession& operator=(const RawSession&) = delete;
  // The statement's error, "" when it succeeded.
  std::string exec(const std::string& sql) {
    PGresult* r = PQexec(c_, sql.c_str());
    auto status = PQresultStatus(r);
    std::string error = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK ? "" : PQresultErrorMessage(r);
    PQclear(r);
    return error;
  }

 private:
  PGconn* c_;
};

// Every writer of a kept first attempt's row writes it before it locks the
// intent: a refusal of the intent (an outcome without an attempt) beside a
// retry whose row is written and whose compare-and-set is still to come
// waits for the retry, which goes on. Locking the intent first, the refusal
// would hold it while it waited for the retry's row, and the retry's
// compare-and-set would wait for the refusal: a deadlock, which the retry's
// session (its detector the quicker) would report.
TEST_CASE("postgresql: a refusal beside a retry of a kept first attempt waits for it, in one lock order" *
          doctest::test_suite("db")) {
  auto backend = postgresql_backend();
  auto stores = sessions(*backend, 1);
  auto& store = *stores.front();
  auto const id = started(store, "h-11");
  answer_retryable(store, id);
  RawSession retry(backend->config.url);
  REQUIRE(retry.exec("SET deadlock_timeout = '20ms'") == "");
  REQUIRE(retry.exec("BEGIN") == "");
  REQUIRE(retry.exec("SELECT idemgate_keep_first_attempts(ARRAY[" + text(id) + "]::bigint[])") == "");
  auto refused_async = std::async(std::launch::async, [&] { return store.record_outcome(refusal(id)); });
  CHECK(lock_waits(*backend, "1\n") == "1\n");  // on the retry's row
  CHECK(retry.exec("UPDATE intents SET state = 'dispatched', attempts = 2 WHERE id = " + text(id)) == "");
  CHECK(retry.exec("COMMIT") == "");
  auto refused = refused_async.get();
  REQUIRE(refused.has_error());
  CHECK(refused.error() == errc::illegal_transition);  // dispatched by the retry meanwhile
  CHECK(backend->query("SELECT number || ' ' || state || ' ' || answer_class FROM attempts") ==
        "1 answered transient\n");
}
