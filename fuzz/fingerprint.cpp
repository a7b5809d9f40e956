// The canonicaliser: JSON and form bodies, the target and configured headers,
// through fingerprint(), canonical_json() and parse_form().
// Input: line 1 the Content-Type, line 2 the origin-form target, the rest the body.
#include "fuzz/split.hpp"
#include "policy/fingerprint.hpp"
#include "policy/json_parse.hpp"

#include <boost/json/parse.hpp>

#include <cstdlib>

using namespace idemgate::policy;

namespace {

const Tool& http_tool() {
  static const Tool tool = [] {
    Tool t;
    t.name = "charge";
    t.effect = Effect::money;
    t.match = {"api.example.com", 0, "POST", "/v1/charges", "", {}};
    t.fingerprint.ignore = {"/metadata/request_id", "/items/0", "/a~1b", "/"};
    t.fingerprint.ignore_query = {"expand[]", "trace"};
    t.fingerprint.headers = {"Stripe-Account", "Idempotency-Key"};
    t.require = {"/amount", "/metadata/order", "/items/1"};
    return t;
  }();
  return tool;
}

const Tool& mcp_tool() {
  static const Tool tool = [] {
    Tool t = http_tool();
    t.name = "mcp";
    t.match.mcp_tool = "create_issue";
    return t;
  }();
  return tool;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto rest = idemgate::fuzz::as_text(data, size);
  const auto content_type = idemgate::fuzz::take_line(rest);
  const auto target = idemgate::fuzz::take_line(rest);
  const Header headers[] = {{"Stripe-Account", "acct_1"}, {"Idempotency-Key", "k"}};
  FingerprintInput input{"POST", "https", "API.Example.com", 8443, target, content_type, rest, headers};
  for (const Tool* tool : {&http_tool(), &mcp_tool()}) {
    const auto first = fingerprint(input, *tool);
    const auto again = fingerprint(input, *tool);
    if (first.hex.size() != 64 || first.hex != again.hex) std::abort();
    (void)missing_required(*tool, first.body ? &*first.body : nullptr);
  }
  (void)parse_form(rest);

  // The exact parser accepts what Boost.JSON accepts, and canonical JSON is
  // a fixed point: re-parsing it gives the same text.
  boost::system::error_code ec, boost_ec;
  const auto value = parse_json(rest, ec);
  (void)boost::json::parse(rest, boost_ec);
  if (!ec != !boost_ec) std::abort();
  if (!ec) {
    const auto canonical = canonical_json(value);
    const auto reparsed = parse_json(canonical, ec);
    if (!ec && canonical_json(reparsed) != canonical) std::abort();
  }
  return 0;
}
