// No secret reaches the ledger: the redaction functions, and a planted secret
// searched for in every byte each backend stored.
#include "backend.hpp"

#include "ledger/redact.hpp"
#include "ledger/store_support.hpp"

#include <boost/json.hpp>

#include <algorithm>

#include <string>
#include <utility>
#include <vector>

using namespace idemgate::ledger;
using namespace idemgate::ledger::test;

namespace {

idemgate::config::Redact rules() {
  idemgate::config::Redact r;
  r.headers = {"X-Api-Key"};
  r.body = {"/card/number", "/password"};
  return r;
}

}  // namespace

TEST_CASE("unit: redact_headers drops credentials and configured headers") {
  Headers in{{"authorization", "Bearer s1"}, {"Proxy-Authorization", "Basic s2"},
             {"Cookie", "a=s3"},           {"SET-COOKIE", "b=s4"},
             {"x-api-key", "s5"},          {"Content-Type", "application/json"}};
  auto out = redact_headers(in, rules());
  REQUIRE(out.size() == 1);
  CHECK(out[0].first == "Content-Type");
}

TEST_CASE("unit: redact_body replaces JSON pointers and form fields") {
  CHECK(redact_body(R"({"card":{"number":"4242","cvc":1},"amount":5})", "application/json",
                    rules()) == R"({"card":{"number":"[redacted]","cvc":1},"amount":5})");
  CHECK(redact_body("amount=5&card[number]=4242&password=hunter2",
                    "application/x-www-form-urlencoded; charset=utf-8",
                    rules()) == "amount=5&card[number]=%5Bredacted%5D&password=%5Bredacted%5D");
  CHECK(redact_body("card%5Bnumber%5D=4242", "application/x-www-form-urlencoded", rules()) ==
        "card%5Bnumber%5D=%5Bredacted%5D");
  CHECK(redact_body("not json", "text/plain", rules()) == "not json");
  CHECK(redact_body(R"({"other":1})", "application/json", rules()) == R"({"other":1})");
}

TEST_CASE("unit: a field the rules name cannot hide behind a key written twice") {
  // A document keeps the last value of a repeated key: the first one, the
  // card number, is in the text but not in the document the rules were
  // applied to. The body is kept as the document, so the number is gone.
  std::string const secret = "4242424242424242";
  for (std::string const& body : {R"({"card":{"number":")" + secret + R"("},"card":null})",
                                 R"({"card":{"number":")" + secret + R"(","number":"[redacted]"}})",
                                 R"([{"a":1,"a":{"x":")" + secret + R"("}, "a":2}])"}) {
    auto const redacted = redact_body(body, "application/json", rules());
    CHECK(redacted.find(secret) == std::string::npos);
    CHECK(redact_request({"POST", "/v1/charges", {{"Content-Type", "application/json"}}, body}, rules()).find(secret) ==
          std::string::npos);
    CHECK(redact_response(StoredResponse{200, {{"Content-Type", "application/json"}}, body}, rules(), 1 << 20)
              .body.find(secret) == std::string::npos);
  }
  // Without a repeated key, a body no rule finds anything in is kept as sent.
  CHECK(redact_body(R"({"card": {"cvc": 1}, "a": [{"a": 1}, {"a": 2}]})", "application/json", rules()) ==
        R"({"card": {"cvc": 1}, "a": [{"a": 1}, {"a": 2}]})");
}

TEST_CASE("unit: with redact.body set, a JSON body the rules cannot reach into is not kept") {
  std::string const secret = "4242424242424242";
  std::string const card = R"({"card":{"number":")" + secret + R"("})";
  // What Boost.JSON refuses but a provider may read as JSON: invalid UTF-8,
  // nesting past 32, a lone surrogate, a byte order mark, trailing bytes.
  std::vector<std::pair<std::string, std::string>> const unreadable{
      {card + R"(,"n":")" + "\xff" + "\"}", "application/json"},
      {card + R"(,"x":)" + std::string(33, '[') + std::string(33, ']') + "}", "application/json"},
      {card + R"(,"x":"\ud800"})", "application/json; charset=utf-8"},
      {"\xef\xbb\xbf" + card + "}", "text/plain"},
      {card + "}x", "application/vnd.api+json"},
      {" [" + card + R"(}, 1e2147483648])", ""},
  };
  for (auto const& [body, type] : unreadable) {
    CHECK(redact_body(body, type, rules()).empty());
    CHECK(redact_request({"POST", "/v1/charges", {{"Content-Type", type}}, body}, rules()).find(secret) ==
          std::string::npos);
    CHECK(redact_response(StoredResponse{200, {{"Content-Type", type}}, body}, rules(), 1 << 20).body.empty());
  }
  // Without rules nothing is dropped; a body that is not JSON stays.
  CHECK(redact_body(std::get<0>(unreadable[0]), "application/json", {}) == std::get<0>(unreadable[0]));
  CHECK(redact_body("card number " + secret, "text/plain", rules()) == "card number " + secret);
  // JSON labelled as a form is JSON to the rules (a provider may ignore the
  // label); a form type with a tab before its parameters is still a form.
  CHECK(redact_body(card + "}", "application/x-www-form-urlencoded", rules()) ==
        R"({"card":{"number":"[redacted]"}})");
  CHECK(redact_body("card[number]=" + secret, "application/x-www-form-urlencoded\t; charset=utf-8", rules()) ==
        "card[number]=%5Bredacted%5D");
  // A document rewritten (a repeated key) that would serialise a number past
  // a double's range as Infinity, which is not JSON, is not kept either.
  CHECK(redact_body(R"({"a":1,"a":2,"x":1e999})", "application/json", rules()).empty());
}

TEST_CASE("unit: redact_response caps the body and flags it") {
  StoredResponse r{200, {{"Set-Cookie", "x"}}, std::string(100, 'a')};
  auto out = redact_response(r, {}, 10);
  CHECK(out.body.size() == 10);
  CHECK(out.truncated);
  CHECK(out.headers.empty());
}

TEST_CASE("unit: the default credential headers are dropped in any spelling") {
  Headers in{{"X-Api-Key", "s1"},       {"api-key", "s2"},          {"X-Auth-Token", "s3"},
             {"x-goog-api-key", "s4"},  {"X-Stripe-Secret", "s5"},  {"X-Session-Token", "s6"},
             {"Ocp-Apim-Subscription-Key", "s7"}, {"Accept", "json"}, {"Idempotency-Key", "k"},
             {"Content-Type", "application/json"}};
  auto out = redact_headers(in, {});
  REQUIRE(out.size() == 3);
  CHECK(out[0].first == "Accept");
  CHECK(out[1].first == "Idempotency-Key");
  CHECK(out[2].first == "Content-Type");
}

TEST_CASE("unit: credential query parameters are redacted in a stored target") {
  idemgate::config::Redact r;
  r.query = {"my_param"};
  CHECK(redact_target("/v1/x?api_key=s1&limit=5&Token=s2&API-KEY=s3&client_secret=s4&sig=s5&my-param=s6&q=ok", r) ==
        "/v1/x?api_key=%5Bredacted%5D&limit=5&Token=%5Bredacted%5D&API-KEY=%5Bredacted%5D&client_secret=%5Bredacted%5D"
        "&sig=%5Bredacted%5D&my-param=%5Bredacted%5D&q=ok");
  CHECK(redact_target("/v1/x?%61pi_key=s1&access%5Ftoken=s2", r) ==
        "/v1/x?%61pi_key=%5Bredacted%5D&access%5Ftoken=%5Bredacted%5D");
  CHECK(redact_target("http://h/v1/x?x-amz-signature=s&password", r) ==
        "http://h/v1/x?x-amz-signature=%5Bredacted%5D&password=%5Bredacted%5D");
  CHECK(redact_target("/v1/x", r) == "/v1/x");
  CHECK(redact_target("/v1/x?", r) == "/v1/x?");
  const auto snapshot = redact_request({"GET", "http://h/v1/x?key=PLANTED&n=1", {}, ""}, r);
  CHECK(snapshot.find("PLANTED") == std::string::npos);
  CHECK(snapshot.find("n=1") != std::string::npos);
}

namespace {

// The snapshot as a Boost.JSON document would serialise it: what
// redact_request wrote before it wrote the text itself.
std::string snapshot_by_document(const RequestSnapshot& request, const idemgate::config::Redact& r) {
  boost::json::array headers;
  for (const auto& [n, v] : redact_headers(request.headers, r))
    headers.push_back(boost::json::array{boost::json::string(n), boost::json::string(v)});
  boost::json::object snapshot;
  snapshot["method"] = request.method;
  snapshot["target"] = redact_target(request.target, r);
  snapshot["headers"] = std::move(headers);
  std::string_view type;
  for (const auto& [n, v] : request.headers)
    if (n == "Content-Type") type = v;
  auto body = redact_body(request.body, type, r);
  // JSON nesting at most 31 deep: the snapshot around it is one level more.
  boost::json::parse_options options;
  options.max_depth = 31;
  boost::system::error_code ec;
  boost::json::parse(body, ec, {}, options);
  if (ec) {
    snapshot["body"] = body;
    return boost::json::serialize(snapshot);
  }
  // A JSON body goes in as it was sent (a document would respell it).
  snapshot["body"] = nullptr;
  auto text = boost::json::serialize(snapshot);
  text.replace(text.size() - 5, 4, body);  // the "null" before the last '}'
  return text;
}

}  // namespace

TEST_CASE("unit: redact_request writes the text a JSON document would, byte for byte, a JSON body as sent") {
  std::string controls;
  for (int c = 0; c < 0x20; ++c) controls += static_cast<char>(c);
  std::vector<RequestSnapshot> cases{
      {"POST", "/v1/charges?api_key=s&n=1", {{"Content-Type", "application/json"}, {"Authorization", "Bearer s"}},
       R"({"amount": 500, "card": {"number": "4242", "cvc": 1}, "list": [1, 2.5, true, null]})"},
      {"PUT", "http://h/x", {{"X-Quote", "a\"b\\c"}, {"X-Ctl", controls}, {"X-Utf8", "caf\xc3\xa9 \xff\x7f"}},
       "not json \"quoted\" \\ \n"},
      {"PATCH", "/f", {{"Content-Type", "application/x-www-form-urlencoded"}}, "card[number]=4242&amount=5"},
      {"DELETE", "/", {}, ""},
      {"POST", "/j", {{std::string(200, 'H'), std::string(300, 'v')}, {"X-" + std::string(70, 'a') + "-Token", "s"}},
       "[1,\"two\",{\"three\":3}]"},
      // JSON by Boost.JSON's rules or not: a number past a double's digits,
      // white space around it; a comment, a trailing comma, invalid UTF-8,
      // nesting past 32, a second document, a bare word.
      {"POST", "/n", {{"Content-Type", "application/json"}}, " {\"n\": 123456789012345678901234567890, \"e\": 1E2}\n"},
      {"POST", "/c", {}, "{\"a\": 1 /* note */}"},
      {"POST", "/t", {}, "[1, 2,]"},
      {"POST", "/u", {}, "\"caf\xc3\""},
      {"POST", "/d", {}, std::string(33, '[') + std::string(33, ']')},
      {"POST", "/d", {}, std::string(32, '[') + std::string(32, ']')},
      {"POST", "/2", {}, "{} {}"},
      {"POST", "/w", {}, "nul"},
      {"POST", "/s", {}, " \t\r\n"},
      {"POST", "/bom", {}, "\xef\xbb\xbf{}"},
      {"POST", "/inf", {}, "[1e999]"},
      {"POST", "/ctl", {}, "[\"a\x01b\"]"},
      {"POST", "/nul", {}, std::string("[\"a\0b\"]", 7)},
      {"POST", "/31", {}, std::string(31, '[') + std::string(31, ']')},
  };
  for (const auto& r : {idemgate::config::Redact{}, rules()})
    for (const auto& request : cases) {
      auto const text = redact_request(request, r);
      CHECK(text == snapshot_by_document(request, r));
      // Whatever the body, the snapshot reads back, and a JSON body as JSON.
      boost::system::error_code ec;
      auto const back = parse_snapshot(text, ec);
      REQUIRE_MESSAGE(!ec, request.target);
      boost::system::error_code body_ec;
      auto const body = boost::json::parse(request.body, body_ec);
      if (r.body.empty() && !body_ec && request.target != "/d")
        CHECK(back.at("body") == body);
    }
  // Nesting 31 deep is JSON in the snapshot, 32 is a string (the snapshot
  // around it would be 33).
  boost::system::error_code ec;
  CHECK(parse_snapshot(redact_request(cases.back(), {}), ec).at("body").is_array());
  CHECK(parse_snapshot(redact_request(cases[10], {}), ec).at("body").is_string());
  // The number keeps every digit it was sent with.
  auto const big = redact_request(cases[5], {});
  CHECK(big.find("123456789012345678901234567890, \"e\": 1E2}\n}") != std::string::npos);
}

TEST_CASE("unit: stored headers are the JSON a document would serialise, and read back whole") {
  std::string controls;
  for (int c = 0; c < 0x20; ++c) controls += static_cast<char>(c);
  for (const Headers& headers :
       {Headers{}, Headers{{"Content-Type", "application/json"}},
        Headers{{"X-Quote", "a\"b\\c"}, {"X-Ctl", controls}, {"X-Utf8", "caf\xc3\xa9 \x7f"}, {"", ""}}}) {
    boost::json::array doc;
    for (const auto& [n, v] : headers) doc.push_back(boost::json::array{boost::json::string(n), boost::json::string(v)});
    auto const text = idemgate::ledger::detail::encode_headers(headers);
    CHECK(text == boost::json::serialize(doc));
    CHECK(idemgate::ledger::detail::decode_headers(text) == headers);
  }
}

TEST_CASE("unit: a JSON string is escaped as Boost.JSON escapes it, wherever the byte falls") {
  // Every length to past two eight-byte words, each escaped byte (and a
  // high one) at every position: the word-at-a-time scan's edges.
  for (char special : {'"', '\\', '\n', '\x01', '\x1f', '\x7f', '\x80', ' '})
    for (std::size_t length = 0; length <= 20; ++length)
      for (std::size_t at = 0; at <= length; ++at) {
        std::string s(length, 'a');
        if (at < length) s[at] = special;
        std::string out;
        idemgate::ledger::detail::append_json_string(out, s);
        CHECK(out == boost::json::serialize(boost::json::string_view(s)));
      }
}

TEST_CASE("unit: a header's verdict is the same the first time and every time after, whatever came between") {
  // The verdicts are remembered per thread in a small table: hundreds of
  // names land on the same slots, each asked again after the others.
  Headers in;
  for (int i = 0; i < 300; ++i) {
    in.emplace_back("X-Plain-" + std::to_string(i), "kept");
    in.emplace_back("X-Token-" + std::to_string(i), "s");
    in.emplace_back(i % 2 ? "authorization" : "AUTHORIZATION", "s");
    in.emplace_back("X-" + std::string(70 + i % 3, 'p'), "kept");
  }
  for (int round = 0; round < 3; ++round) {
    auto const out = redact_headers(in, {});
    REQUIRE(out.size() == 600);
    for (auto const& [name, value] : out) CHECK(value == "kept");
  }
  // The configured names still count, remembered verdicts or not.
  idemgate::config::Redact r;
  r.headers = {"x-plain-7"};
  auto const out = redact_headers(in, r);
  CHECK(out.size() == 599);
  CHECK(std::none_of(out.begin(), out.end(), [](const auto& h) { return h.first == "X-Plain-7"; }));
}

TEST_CASE("unit: header names longer than the folding buffer are still recognised") {
  Headers in{{"X-" + std::string(80, 'a') + "-Api-Key", "s1"}, {"X-" + std::string(80, 'b'), "kept"}};
  auto out = redact_headers(in, {});
  REQUIRE(out.size() == 1);
  CHECK(out[0].second == "kept");
}

LEDGER_CONFORMANCE(planted_secret, "a planted secret is stored nowhere") {
  auto ledger = open_ledger(backend, "replica-a", rules());
  RequestSnapshot snapshot{"POST",
                           "/v1/charges",
                           {{"Authorization", "Bearer PLANTED-SECRET-1"},
                            {"Cookie", "session=PLANTED-SECRET-2"},
                            {"X-Api-Key", "PLANTED-SECRET-3"},
                            {"Content-Type", "application/json"}},
                           R"({"amount":500,"card":{"number":"PLANTED-SECRET-4"}})"};
  auto reserved = run(ledger->reserve_intent(reserve_request("fp-secret", "key-secret"), snapshot));
  REQUIRE(reserved.has_value());
  auto id = reserved->intent.id;
  CHECK(reserved->intent.request_snapshot.find("\"amount\":500") != std::string::npos);
  REQUIRE(run(ledger->begin_attempt(attempt_now(*ledger, id))).has_value());

  Outcome done;
  done.intent_id = id;
  done.attempt = 1;
  done.state = IntentState::completed;
  done.answer_class = "ok";
  done.status = 200;
  done.response = StoredResponse{200,
                                 {{"Set-Cookie", "s=PLANTED-SECRET-5"},
                                  {"Content-Type", "application/json"}},
                                 R"({"id":"ch_1","password":"PLANTED-SECRET-6"})"};
  auto completed = run(ledger->record_outcome(done));
  REQUIRE(completed.has_value());
  REQUIRE(completed->response.has_value());
  CHECK(completed->response->body == R"({"id":"ch_1","password":"[redacted]"})");
  ledger.reset();  // checkpoint nothing away: the WAL is part of the dump too

  auto stored = backend.dump();
  CHECK(stored.find("ch_1") != std::string::npos);  // the dump does see the rows
  CHECK(stored.find("PLANTED-SECRET") == std::string::npos);
}

LEDGER_CONFORMANCE(redacted_by_another_ledger,
                   "an outcome another ledger redacted is redacted again by the ledger that records it") {
  auto ledger = open_ledger(backend, "replica-a", rules());
  // Another ledger on the same store, with no body rules: what it redacts
  // leaves the body as it is.
  auto other = open_ledger(backend, "replica-b", idemgate::config::Redact{});
  auto reserved = run(ledger->reserve_intent(reserve_request("fp-other", "key-other"), RequestSnapshot{}));
  REQUIRE(reserved.has_value());
  auto id = reserved->intent.id;
  REQUIRE(run(ledger->begin_attempt(attempt_now(*ledger, id))).has_value());

  auto done = completed(id, 1);
  done.response = StoredResponse{200, {{"Content-Type", "application/json"}}, R"({"id":"ch_2","password":"hunter2"})"};
  other->redact(done);
  REQUIRE(done.response.has_value());
  CHECK(done.response->body == R"({"id":"ch_2","password":"hunter2"})");  // the other ledger's rules
  CHECK(done.redacted_by == other.get());

  auto stored = run(ledger->record_outcome(done));
  REQUIRE(stored.has_value());
  REQUIRE(stored->response.has_value());
  CHECK(stored->response->body == R"({"id":"ch_2","password":"[redacted]"})");

  // Redacted by the recording ledger itself: stored as redact() left it,
  // not redacted twice. Past response_cap (256 KiB) the first pass cuts the
  // body and marks it truncated; a second pass would find a truncated JSON
  // body, which it cannot parse to redact, and keep none of it.
  auto next = run(ledger->reserve_intent(reserve_request("fp-once", "key-once"), RequestSnapshot{}));
  REQUIRE(next.has_value());
  REQUIRE(run(ledger->begin_attempt(attempt_now(*ledger, next->intent.id))).has_value());
  auto large = completed(next->intent.id, 1);
  large.response = StoredResponse{200,
                                  {{"Content-Type", "application/json"}},
                                  R"({"id":"ch_3","password":"hunter2","pad":")" + std::string(300 * 1024, 'a') +
                                      R"("})"};
  ledger->redact(large);
  REQUIRE(large.response.has_value());
  CHECK(large.redacted_by == ledger.get());
  CHECK(large.response->truncated);
  REQUIRE(large.response->body.size() == 256 * 1024);
  CHECK(large.response->body.find("hunter2") == std::string::npos);
  auto kept = run(ledger->record_outcome(large));
  REQUIRE(kept.has_value());
  REQUIRE(kept->response.has_value());
  CHECK(kept->response->body == large.response->body);
}
