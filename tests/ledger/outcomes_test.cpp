// Outcomes recorded many at once on a real database (Store::record_outcomes,
// as the ledger's group commit calls it): each intent settled exactly as
// record_outcome would one by one, in a batch whose commit does not wait for
// the disk too; and a value the server refuses fails its own outcome only.
#include "backend.hpp"

#include "ledger/open_store.hpp"

#include <tuple>

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

// In a batch whose commit does not wait for the disk (Durability::deferred,
// as outcomes recorded after their answers are): what it commits is the
// same, atomic and visible to a new connection at once.
LEDGER_CONFORMANCE(record_outcomes_batched,
                   "record_outcomes settles many intents at once exactly as record_outcome does one by one") {
  REQUIRE(migrate(backend.config).has_value());
  auto store = open_store(backend);
  std::vector<std::int64_t> ids;
  for (const char* fp : {"o-a", "o-b", "o-c", "o-d", "o-e", "o-f", "o-g"}) ids.push_back(reserve(*store, fp));
  auto [a, b, c, d, e, f, g] = std::tuple{ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]};
  for (auto id : {a, b, c, d, f, g}) REQUIRE(store->begin_attempt(attempt_now(*store, id), "replica-a").has_value());
  EscalationRequest er;
  er.run = "run-1";
  er.intent_id = b;
  er.reason_code = "tool_outcome_unknown";
  er.package_json = "{}";
  auto escalation = store->persist_escalation(er).value();

  std::vector<Outcome> outcomes;
  auto with_response = completed(a, 1);
  with_response.response = StoredResponse{201, {{"Content-Type", "application/json"}}, std::string("{\"id\":\"ch_1\"}\0x", 16), true};
  outcomes.push_back(with_response);
  outcomes.push_back(completed(b, 1));
  Outcome unknown_c;
  unknown_c.intent_id = c;
  unknown_c.attempt = 1;
  unknown_c.state = IntentState::unknown;
  unknown_c.answer_class = "unknown";
  outcomes.push_back(unknown_c);
  Outcome retry_d;
  retry_d.intent_id = d;
  retry_d.attempt = 1;
  retry_d.state = IntentState::retryable;
  retry_d.answer_class = "rate_limited";
  retry_d.status = 429;
  retry_d.retry_after = std::chrono::minutes(5);
  retry_d.waive = true;
  // What an array element must escape, and what looks like SQL or NULL.
  retry_d.receipt = "a\\b\"c{d},e NULL '' \xc3\xa9";
  outcomes.push_back(retry_d);
  outcomes.push_back(completed(e, 1));      // no attempt began: illegal_transition
  outcomes.push_back(completed(99999999, 1));  // no such intent: not_found
  outcomes.push_back(completed(c, 1));      // c's second outcome: unknown, then its answer
  auto stale_f = completed(f, 2);           // an attempt f never had: refused
  outcomes.push_back(stale_f);
  auto no_receipt_g = completed(g, 1);
  no_receipt_g.receipt.clear();
  no_receipt_g.state = IntentState::denied;
  no_receipt_g.answer_class = "validation";
  no_receipt_g.status = 400;
  outcomes.push_back(no_receipt_g);

  std::vector<Result<Intent>> results;
  auto failed = store->batch([&] { results = store->record_outcomes(outcomes); }, Store::Calls::isolated,
                             Store::Durability::deferred);
  REQUIRE_MESSAGE(!failed, failed.message());
  REQUIRE(results.size() == outcomes.size());
  for (std::size_t i : {0, 1, 2, 3, 6, 8}) REQUIRE_MESSAGE(results[i].has_value(), i << ": " << results[i].error().message());
  CHECK(results[0]->state == IntentState::completed);
  CHECK(results[0]->receipt == "r-" + std::to_string(a));
  REQUIRE(results[0]->response.has_value());
  CHECK(results[0]->response->status == 201);
  CHECK(results[0]->response->body == std::string("{\"id\":\"ch_1\"}\0x", 16));
  CHECK(results[0]->response->truncated);
  CHECK(results[1]->state == IntentState::completed);
  CHECK(results[2]->state == IntentState::unknown);
  CHECK(results[2]->unknown_since.has_value());
  CHECK(results[3]->state == IntentState::retryable);
  CHECK(results[3]->retry_not_before.has_value());
  CHECK(results[3]->waived == 1);
  CHECK(results[3]->status == 429);
  CHECK(results[3]->receipt == retry_d.receipt);
  CHECK(results[4].error() == errc::illegal_transition);
  CHECK(results[5].error() == errc::not_found);
  CHECK(results[6]->state == IntentState::completed);
  CHECK(!results[6]->unknown_since.has_value());
  CHECK(results[7].error() == errc::illegal_transition);
  CHECK(results[8]->state == IntentState::denied);
  CHECK(results[8]->receipt.empty());
  CHECK(!results[8]->response.has_value());

  // Durable, read back on a new connection.
  auto again = open_store(backend);
  CHECK(again->find_intent(a)->response->headers.size() == 1);
  CHECK(again->find_intent(b)->receipt == "r-" + std::to_string(b));
  auto settled = again->find_escalation(escalation);
  CHECK(settled->state == EscalationState::completed);
  CHECK(settled->resolved_by == "idemgate");
  CHECK(settled->receipt == "r-" + std::to_string(b));
  CHECK(again->find_intent(c)->state == IntentState::completed);
  CHECK(again->find_intent(d)->receipt == "a\\b\"c{d},e NULL '' \xc3\xa9");
  CHECK(again->find_intent(e)->state == IntentState::reserved);
  CHECK(again->find_intent(f)->state == IntentState::dispatched);
  CHECK(backend.query("SELECT state || ':' || answer_class || ':' || coalesce(CAST(status AS TEXT), '-') || ':' || receipt "
                      "FROM attempts WHERE intent_id = " + std::to_string(c)) ==
        "answered:ok:200:r-" + std::to_string(c) + "\n");
  CHECK(backend.query("SELECT state FROM attempts WHERE intent_id = " + std::to_string(d)) == "answered\n");
  CHECK(backend.query("SELECT count(*) FROM attempts WHERE intent_id = " + std::to_string(f) +
                      " AND state = 'dispatched'") == "1\n");
}

// Outcomes after their answers (Outcome::after_answer), as the recorder off
// the request path sends them: each result names its own intent and the
// state it moved to (PostgreSQL sends nothing more back), a refused one is
// still an error, and what is stored is the whole outcome.
LEDGER_CONFORMANCE(record_outcomes_after_answer,
                   "outcomes after their answers come back as their intents' ids and new states") {
  REQUIRE(migrate(backend.config).has_value());
  auto store = open_store(backend);
  std::vector<std::int64_t> ids;
  for (const char* fp : {"aa-a", "aa-b", "aa-c"}) ids.push_back(reserve(*store, fp));
  for (auto id : {ids[0], ids[2]}) REQUIRE(store->begin_attempt(attempt_now(*store, id), "replica-a").has_value());
  // In descending id order: the results must follow the outcomes, not the
  // order the statement settles them in.
  std::vector<Outcome> outcomes;
  Outcome unknown_c;
  unknown_c.intent_id = ids[2];
  unknown_c.attempt = 1;
  unknown_c.state = IntentState::unknown;
  unknown_c.answer_class = "unknown";
  outcomes.push_back(unknown_c);
  outcomes.push_back(completed(ids[1], 1));  // no attempt began: illegal_transition
  auto answered_a = completed(ids[0], 1);
  answered_a.response = StoredResponse{200, {{"Content-Type", "application/json"}}, "{\"id\":\"x\"}", false};
  outcomes.push_back(answered_a);
  for (auto& o : outcomes) o.after_answer = true;

  std::vector<Result<Intent>> results;
  auto failed = store->batch([&] { results = store->record_outcomes(outcomes); }, Store::Calls::isolated,
                             Store::Durability::deferred);
  REQUIRE_MESSAGE(!failed, failed.message());
  REQUIRE(results.size() == 3);
  REQUIRE(results[0].has_value());
  CHECK(results[0]->id == ids[2]);
  CHECK(results[0]->state == IntentState::unknown);
  CHECK(results[1].error() == errc::illegal_transition);
  REQUIRE(results[2].has_value());
  CHECK(results[2]->id == ids[0]);
  CHECK(results[2]->state == IntentState::completed);

  auto again = open_store(backend);
  auto a = again->find_intent(ids[0]);
  REQUIRE(a.has_value());
  CHECK(a->state == IntentState::completed);
  CHECK(a->receipt == "r-" + std::to_string(ids[0]));
  REQUIRE(a->response.has_value());
  CHECK(a->response->body == "{\"id\":\"x\"}");
  CHECK(again->find_intent(ids[2])->state == IntentState::unknown);
  CHECK(again->find_intent(ids[1])->state == IntentState::reserved);
}

TEST_CASE("postgresql: a value the server refuses fails its own outcome only, not the batched statement's others" *
          doctest::test_suite("db")) {
  auto backend = postgresql_backend();
  REQUIRE(migrate(backend->config).has_value());
  auto store = open_store(*backend);
  auto a = reserve(*store, "bad-a");
  auto b = reserve(*store, "bad-b");
  auto c = reserve(*store, "bad-c");
  for (auto id : {a, b, c}) REQUIRE(store->begin_attempt(attempt_now(*store, id), "replica-a").has_value());
  std::vector<Outcome> outcomes{completed(a, 1), completed(b, 1), completed(c, 1)};
  outcomes[1].receipt = "\xff\xfe not UTF-8";  // refused by a UTF8 database: the statement fails
  std::vector<Result<Intent>> results;
  auto failed = store->batch([&] { results = store->record_outcomes(outcomes); });
  REQUIRE_MESSAGE(!failed, failed.message());
  REQUIRE(results.size() == 3);
  CHECK(results[0].has_value());
  CHECK(results[1].error() == errc::storage_failure);
  CHECK(results[2].has_value());
  CHECK(backend->query("SELECT string_agg(state, ',' ORDER BY id) FROM intents") == "completed,dispatched,completed\n");
}

// Text that a text array literal would have to quote and escape (the form
// the PostgreSQL store sent until it passed its columns as binary arrays):
// " and \ at every offset in and across an eight-byte word, runs of them,
// bytes that differ from them by one bit or one value, and long plain runs,
// read back exact.
LEDGER_CONFORMANCE(record_outcomes_escapes,
                   "record_outcomes stores text with quotes and backslashes at every offset exactly") {
  REQUIRE(migrate(backend.config).has_value());
  auto store = open_store(backend);
  std::vector<std::string> receipts;
  std::string const plain = "abcdefghijklmnopqrstuvwx";
  for (std::size_t at = 0; at <= 17; ++at) {
    for (char special : {'"', '\\'}) {
      std::string r = plain.substr(0, at);
      r += special;
      r += plain.substr(0, at % 5);
      receipts.push_back(r);
    }
  }
  receipts.push_back("\\\"\"\\\\\"x");                      // a run of them
  receipts.push_back("abcdefg\"\\abcdefg\\\"abcdefgh\"");   // astride word ends
  // Neighbours, and bytes that are " or \ with the high bit set (in valid
  // UTF-8: a PostgreSQL text column takes nothing else): \xc2\xa2 is U+00A2,
  // \xdc\x80 U+0700.
  receipts.push_back("\xc2\xa2\xdc\x80\x22\x5c\x21\x23\x5b\x5d\x01\x7f\xc3\xa9\"");
  receipts.push_back(std::string(40, 'z') + "\"" + std::string(9, 'y'));
  receipts.push_back("{\"a\":\"b\\\\n\",\"c\":[1,\"d\"]}");  // JSON, as snapshots and headers are
  receipts.push_back(std::string(64, '\\'));

  std::vector<std::int64_t> ids;
  for (std::size_t i = 0; i < receipts.size(); ++i) {
    ids.push_back(reserve(*store, "esc-" + std::to_string(i)));
    REQUIRE(store->begin_attempt(attempt_now(*store, ids.back()), "replica-a").has_value());
  }
  std::vector<Outcome> outcomes;
  for (std::size_t i = 0; i < receipts.size(); ++i) {
    auto o = completed(ids[i], 1);
    o.receipt = receipts[i];
    outcomes.push_back(o);
  }
  std::vector<Result<Intent>> results;
  auto failed = store->batch([&] { results = store->record_outcomes(outcomes); });
  REQUIRE_MESSAGE(!failed, failed.message());
  REQUIRE(results.size() == receipts.size());
  auto again = open_store(backend);
  for (std::size_t i = 0; i < receipts.size(); ++i) {
    REQUIRE_MESSAGE(results[i].has_value(), i << ": " << results[i].error().message());
    auto stored = again->find_intent(ids[i]);
    REQUIRE(stored.has_value());
    CHECK_MESSAGE(stored->receipt == receipts[i], i << ": " << receipts[i]);
  }
}

// A batch's other columns as they are stored: a body of every byte value
// (bytea elements), a status at int4's edge of what HTTP can carry, an
// absent status (a NULL element beside set ones), and a Retry-After whose
// milliseconds pass 2^32 (an int8 element's high half).
LEDGER_CONFORMANCE(record_outcomes_binary_columns,
                   "record_outcomes stores every byte of a body, NULLs and wide numbers exactly") {
  REQUIRE(migrate(backend.config).has_value());
  auto store = open_store(backend);
  auto const a = reserve(*store, "bin-a"), b = reserve(*store, "bin-b");
  for (auto id : {a, b}) REQUIRE(store->begin_attempt(attempt_now(*store, id), "replica-a").has_value());
  std::string every_byte;
  for (int round = 0; round < 2; ++round)
    for (int c = 0; c < 256; ++c) every_byte += static_cast<char>(c);
  auto body = completed(a, 1);
  body.status = 599;
  body.response = StoredResponse{599, {{"X-Odd", "\"\\"}}, every_byte, false};
  Outcome wait_b;
  wait_b.intent_id = b;
  wait_b.attempt = 1;
  wait_b.state = IntentState::retryable;
  wait_b.answer_class = "rate_limited";
  wait_b.retry_after = std::chrono::days(60);  // 5,184,000,000 ms
  std::vector<Result<Intent>> results;
  auto const before = std::chrono::system_clock::now();
  auto failed = store->batch([&] { results = store->record_outcomes(std::vector{body, wait_b}); });
  REQUIRE_MESSAGE(!failed, failed.message());
  REQUIRE(results.size() == 2);
  for (auto& r : results) REQUIRE_MESSAGE(r.has_value(), r.error().message());
  auto again = open_store(backend);
  auto stored_a = again->find_intent(a);
  REQUIRE(stored_a.has_value());
  CHECK(stored_a->status == 599);
  REQUIRE(stored_a->response.has_value());
  CHECK(stored_a->response->status == 599);
  CHECK(stored_a->response->body == every_byte);
  REQUIRE(stored_a->response->headers.size() == 1);
  CHECK(stored_a->response->headers[0].second == "\"\\");
  auto stored_b = again->find_intent(b);
  REQUIRE(stored_b.has_value());
  CHECK_FALSE(stored_b->status.has_value());
  CHECK_FALSE(stored_b->response.has_value());
  REQUIRE(stored_b->retry_not_before.has_value());
  auto const wait = *stored_b->retry_not_before - before;
  CHECK(wait >= std::chrono::days(60) - std::chrono::minutes(1));
  CHECK(wait <= std::chrono::days(60) + std::chrono::minutes(1));
}
