// Reconcile-query URL templates, lookup answers and receipts.
#include "policy/reconcile.hpp"

#include <boost/json/parse.hpp>
#include <doctest/doctest.h>

using namespace idemgate::policy;

TEST_CASE("url templates expand key, receipt and body pointers, percent-encoded") {
  const auto body = boost::json::parse(R"({"metadata":{"order":"A 7/1"},"amount":500})");
  const TemplateValues values{.key = "idem_1+2", .receipt = "ch_1", .body = &body};
  CHECK(expand_url_template("https://x.example/v1/find?ref={key}&o={/metadata/order}&a={/amount}&r={receipt}", values) ==
        std::optional<std::string>("https://x.example/v1/find?ref=idem_1%2B2&o=A%207%2F1&a=500&r=ch_1"));
  CHECK_FALSE(expand_url_template("https://x.example/?o={/missing}", values));
  CHECK_FALSE(expand_url_template("https://x.example/?r={receipt}", {.key = "k", .receipt = "", .body = nullptr}));
  CHECK_FALSE(expand_url_template("https://x.example/?r={key", values));
}

TEST_CASE("url template syntax") {
  CHECK_FALSE(url_template_error("https://x/?a={key}&b={receipt}&c={/a~1b}"));
  CHECK(url_template_error("https://x/{id}") == std::optional<std::string>("unknown placeholder {id}; use {key}, {receipt} or {/json/pointer}"));
  CHECK(url_template_error("https://x/{/a~2}"));
  CHECK(url_template_error("https://x/{key"));
}

TEST_CASE("query_found and receipt_of read JSON answers, never throw") {
  ReconcileQuery query;
  query.found = "/data/0";
  CHECK(query_found(query, R"({"data":[{"id":"ch_1"}]})"));
  CHECK_FALSE(query_found(query, R"({"data":[]})"));
  CHECK_FALSE(query_found(query, R"({"data":[null]})"));
  CHECK_FALSE(query_found(query, "<html>"));

  Tool tool;
  tool.receipt = "/id";
  CHECK(receipt_of(tool, R"({"id":"ch_1"})") == std::optional<std::string>("ch_1"));
  CHECK(receipt_of(tool, R"({"id":42})") == std::optional<std::string>("42"));
  CHECK_FALSE(receipt_of(tool, R"({"other":1})"));
  CHECK_FALSE(receipt_of(tool, "not json"));
  tool.receipt.clear();
  CHECK_FALSE(receipt_of(tool, R"({"id":"ch_1"})"));
}
