// Where the reconcile query may carry the agent's credentials: a table.
#include "policy/credentials.hpp"

#include <doctest/doctest.h>

using namespace idemgate::policy;

TEST_CASE("credentials go only to the tool's own host, over HTTPS (loopback: HTTP too)") {
  Tool exact;
  exact.match.host = "api.stripe.com";
  Tool glob;
  glob.match.host = "*.example.com";
  struct Row {
    const Tool* tool;
    const char* request_host;
    const char* scheme;
    const char* query_host;
    bool allowed;
  };
  const Row rows[] = {
      {&exact, "api.stripe.com", "https", "api.stripe.com", true},
      {&exact, "api.stripe.com", "https", "API.Stripe.com.", true},
      {&exact, "api.stripe.com", "HTTPS", "api.stripe.com", true},
      {&exact, "api.stripe.com", "http", "api.stripe.com", false},       // plain HTTP off the machine
      {&exact, "api.stripe.com", "https", "evil.example", false},        // another host
      {&exact, "api.stripe.com", "https", "stripe.com", false},
      {&exact, "api.stripe.com", "https", "api.stripe.com.evil.io", false},
      {&exact, "api.stripe.com", "https", "", false},
      {&glob, "a.example.com", "https", "a.example.com", true},         // the host the call went to
      {&glob, "a.example.com", "https", "b.example.com", false},        // the glob is not one host
      {&exact, "127.0.0.1", "http", "127.0.0.1", true},                  // loopback: tests, same machine
      {&exact, "localhost", "http", "localhost", true},
      {&exact, "::1", "http", "[::1]", true},
      {&exact, "127.0.0.1", "http", "localhost", false},                 // the same machine, not the same host
      {&exact, "10.0.0.5", "http", "10.0.0.5", false},                   // private is not loopback
      {&exact, "127.0.0.1", "ftp", "127.0.0.1", false},
  };
  for (const auto& row : rows) {
    CAPTURE(row.request_host);
    CAPTURE(row.scheme);
    CAPTURE(row.query_host);
    CHECK(may_forward_credentials(*row.tool, row.request_host, row.scheme, row.query_host) == row.allowed);
  }
}
