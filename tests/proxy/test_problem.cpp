// Problem bodies: every one carries the `error` member SDKs raise on.
#include "proxy/problem.hpp"

#include <boost/json/parse.hpp>
#include <doctest/doctest.h>

using namespace idemgate::proxy;
namespace json = boost::json;

namespace {
json::object parsed(const Problem& p) { return json::parse(problem_json(p)).as_object(); }
}  // namespace

TEST_CASE("problem: a refusal package has error {type, code, message} stating reason, question, key, attempts") {
  Problem p;
  p.status = 422;
  p.reason_code = "tool_retry_exhausted";
  p.title = "Refused: tool_retry_exhausted";
  p.detail = "the same call failed 3 times";
  p.extra["terminal"] = "escalate";
  p.extra["question_for_human"] = "Is the provider down?";
  p.extra["idempotency_key"] = "idg_abc";
  p.extra["attempts"] = 3;
  p.extra["bound"] = 2;
  auto const o = parsed(p);
  CHECK(o.at("reason_code") == "tool_retry_exhausted");
  auto const& e = o.at("error").as_object();
  CHECK(e.at("type") == "idemgate_refusal");
  CHECK(e.at("code") == "tool_retry_exhausted");
  std::string const m(e.at("message").as_string());
  CHECK(m.find("the same call failed 3 times") != std::string::npos);
  CHECK(m.find("Question for a human: Is the provider down?") != std::string::npos);
  CHECK(m.find("idg_abc") != std::string::npos);
  CHECK(m.find("Attempts: 3/3 (retry.bound 2)") != std::string::npos);
}

TEST_CASE("problem: waits and the proxy's own errors carry error too") {
  Problem wait{409, "in_flight", "The same call is in flight", "wait", 2u, {}};
  auto const w = parsed(wait).at("error").as_object();
  CHECK(w.at("type") == "idemgate_wait");
  CHECK(w.at("code") == "in_flight");
  CHECK(std::string(w.at("message").as_string()).find("Retry after 2s") != std::string::npos);

  auto const own = parsed(bad_request("no Host")).at("error").as_object();
  CHECK(own.at("type") == "idemgate_error");
  CHECK(own.at("code") == "malformed_request");
  CHECK(own.at("message") == "Malformed request: no Host.");
  CHECK(parsed(upstream_tls_failed("bad cert")).at("error").at("code") == "upstream_tls_failed");
}

TEST_CASE("problem: a null key and a missing bound are left out of the message") {
  Problem p{403, "run_frozen", "Refused: run_frozen", "frozen", std::nullopt, {}};
  p.extra["terminal"] = "escalate";
  p.extra["idempotency_key"] = nullptr;
  p.extra["attempts"] = 0;
  auto const m = std::string(parsed(p).at("error").at("message").as_string());
  CHECK(m.find("key") == std::string::npos);
  CHECK(m.find("Attempts: 0.") != std::string::npos);
}
