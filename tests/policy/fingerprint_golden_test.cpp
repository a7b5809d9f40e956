// Fingerprints pinned to digests computed apart from this code (Python's
// hmac over the material the format defines): the format cannot change
// without a new version. Also the two calls with more than one reading: a
// configured header sent twice, and JSON that names a member twice.
#include "policy/fingerprint.hpp"
#include "fingerprint_support.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

using namespace idemgate::policy;
using namespace idemgate::policy::test;

TEST_CASE("golden: the fingerprint's material and HMAC, computed apart from this code") {
  // The expected digests were computed with Python's hmac, keyed with
  // in.key, over the material as the format defines it:
  // "idemgate-fingerprint-v3\n", then each field as "LENGTH:BYTES\n":
  // - the tool's name ("stripe.create_charge"), the method ("POST");
  // - the canonical target, without its default port and (here) without a
  //   query: "https://api.stripe.com/v1/charges";
  // - each configured header but the key header, sorted by lowercase name:
  //   its name and "=value", or "" when absent (here "stripe-account", "";
  //   Idempotency-Key is skipped);
  // - the body's kind as a number (1 JSON, 2 form);
  // - the canonical body: JSON with sorted keys and normalised numbers
  //   ({"amount":100,"currency":"eur"}), or a form's pairs sorted by JSON
  //   pointer, each pointer and value a field of its own
  //   ("7:/amount\n3:100\n9:/currency\n3:eur\n").
  // Changing either changes every stored fingerprint: a new format version,
  // not a quiet edit. (Configured headers, queries, ignored members, raw
  // bodies and MCP calls have golden digests of their own below.)
  auto golden = [](std::string_view body, std::string_view type) {
    FingerprintInput in{.method = "POST", .scheme = "https", .host = "api.stripe.com", .port = 443,
                        .target = "/v1/charges", .content_type = type, .body = body};
    in.key = "golden-key-0123456789abcdef";
    return fingerprint(in, charge_tool()).hex;
  };
  auto const json = "d8a76568f6d70ee41e94d24b982862493816f5e358be738e9b31de0f1e518e35";
  CHECK(golden(R"({"currency":"eur","amount":100})", "application/json") == json);
  CHECK(golden(R"({"amount":1e2,"currency":"eur"})", "application/json\t; charset=utf-8") == json);
  auto const form = "d2f89330dc94592be719e864142ccaf4b1141769b5f536cad27efb1983f93d43";
  CHECK(golden("currency=eur&amount=100", "application/x-www-form-urlencoded") == form);
  CHECK(golden("amount=100&currency=eur", "Application/X-WWW-Form-Urlencoded\t;charset=utf-8") == form);
}

namespace {

// The golden cases below, like the one above, are computed apart from this
// code: Python's hmac.new(key, material, hashlib.sha256), keyed with
// "golden-key-0123456789abcdef", over the material the format defines (each
// field "LENGTH:BYTES\n", LENGTH the byte count in decimal). Each case
// writes out its material in full; where it says P, that is the prefix
// every charge case shares:
//   P = "idemgate-fingerprint-v3\n20:stripe.create_charge\n4:POST\n"
//       "33:https://api.stripe.com/v1/charges\n"
// A digest that no longer matches is a changed format: every stored
// fingerprint with it. That wants a new format version, not a new digest
// pasted here.
std::string golden_fp(std::string_view body, std::string_view type, std::vector<Header> headers = {},
                      std::string_view target = "/v1/charges", std::string_view host = "api.stripe.com",
                      const Tool& tool = charge_tool()) {
  FingerprintInput in{.method = "POST", .scheme = "https", .host = host, .port = 443, .target = target,
                      .content_type = type, .body = body, .headers = headers};
  in.key = "golden-key-0123456789abcdef";
  return fingerprint(in, tool).hex;
}

}  // namespace

TEST_CASE("golden: configured headers, present and absent, computed apart from this code") {
  // charge_tool() names Stripe-Account and Idempotency-Key; the key header
  // never counts, so only "stripe-account" is in the material: "=" and the
  // value when the request has it (its name in any case), "" when it does
  // not.
  //   P "14:stripe-account\n9:=acct_123\n1:1\n31:{"amount":100,"currency":"eur"}\n"
  auto const body = R"({"currency":"eur","amount":100})";
  auto const present = "c28e183b4e53c8c8aa06e07c1b63f4f9d347c550e6d14c00e741921ea9b2aab2";
  CHECK(golden_fp(body, "application/json", {{"Stripe-Account", "acct_123"}}) == present);
  CHECK(golden_fp(body, "application/json", {{"Idempotency-Key", "k-2"}, {"stripe-account", "acct_123"}, {"User-Agent", "x"}}) ==
        present);
  // Absent: the JSON digest of the test above, whatever else is sent.
  //   P "14:stripe-account\n0:\n1:1\n31:{"amount":100,"currency":"eur"}\n"
  auto const absent = "d8a76568f6d70ee41e94d24b982862493816f5e358be738e9b31de0f1e518e35";
  CHECK(golden_fp(body, "application/json") == absent);
  CHECK(golden_fp(body, "application/json", {{"Idempotency-Key", "k-1"}, {"User-Agent", "y"}}) == absent);
  // Present but empty is not absent: "=" against "".
  //   P "14:stripe-account\n1:=\n1:1\n31:{"amount":100,"currency":"eur"}\n"
  CHECK(golden_fp(body, "application/json", {{"Stripe-Account", ""}}) ==
        "3ba639e68a559cecb2dc103f7fb45ae079566052ff1470aaefd80dc7a86ae7c8");

  // Two configured headers, one present and one absent, sorted by lowercase
  // name whatever the configured order:
  //   P "14:stripe-account\n9:=acct_123\n14:stripe-version\n0:\n1:1\n"
  //     "31:{"amount":100,"currency":"eur"}\n"
  Tool tool = charge_tool();
  tool.fingerprint.headers = {"Stripe-Version", "Idempotency-Key", "Stripe-Account"};
  CHECK(golden_fp(body, "application/json", {{"STRIPE-ACCOUNT", "acct_123"}, {"Idempotency-Key", "k-3"}}, "/v1/charges",
                  "api.stripe.com", tool) == "9e5587ba324ac714c712bff9e6b910aa898b4927409cd83aaa5544d9853f3ac2");
}

TEST_CASE("golden: a query, sorted and decoded, an ignored parameter left out, computed apart from this code") {
  // The canonical target carries the query after "?": each parameter's
  // decoded name as a field and "=" and its decoded value as a field ("" for
  // a name with no "="), parameters joined by "&", sorted by name with a
  // name's repeats in the order sent (expand[] b before a), charge_tool()'s
  // ignore_query "trace" left out. The body is empty: kind 0, "".
  //   "idemgate-fingerprint-v3\n20:stripe.create_charge\n4:POST\n"
  //   "131:https://api.stripe.com/v1/charges?6:amount\n4:=100\n&8:currency\n4:=eur\n"
  //     "&8:expand[]\n2:=b\n&8:expand[]\n2:=a\n&4:flag\n0:\n&4:note\n6:=a b&c\n\n"
  //   "14:stripe-account\n0:\n1:0\n0:\n"
  auto const query = "57229330cd36297b0cda2bedf9489c9533c75bf21458d6100826d3ca54ae43db";
  for (std::string_view target : {
           "/v1/charges?currency=eur&trace=t1&amount=100&flag&expand[]=b&expand[]=a&note=a+b%26c",
           // Another order, other escapes, another trace, a path spelled otherwise.
           "/v1/%63harges/?expand%5B%5D=b&note=a%20b%26c&trace=t2&amount=1%30%30&flag&currency=eur&expand[]=a",
           "/v1/charges?flag&note=a+b%26c&&expand[]=b&currency=eur&amount=100&expand[]=a",
       }) {
    CAPTURE(target);
    CHECK(golden_fp("", "application/json", {}, target) == query);
    CHECK(golden_fp("", "application/json", {}, target, "API.Stripe.COM.") == query);
  }
  // A name's repeats are a list: sent in the other order, another intent.
  CHECK(golden_fp("", "application/json", {}, "/v1/charges?expand[]=a&expand[]=b&note=a+b%26c&flag&amount=100&currency=eur") != query);
}

TEST_CASE("golden: a JSON body's ignored member, computed apart from this code") {
  // charge_tool() ignores /meta/request_id: it is removed before the body is
  // made canonical, and only it (its parent stays, even when left empty).
  //   P "14:stripe-account\n0:\n1:1\n50:{"amount":100,"currency":"eur","meta":{"order":7}}\n"
  auto const ignored = "976f9d30ef9b0a610ffcc2324ebe849c668a54f4c36ceda2a5d9008ad5d57b6e";
  CHECK(golden_fp(R"({"meta":{"request_id":"req_1","order":7},"currency":"eur","amount":100})", "application/json") == ignored);
  CHECK(golden_fp(R"({"amount":1e2,"currency":"eur","meta":{"order":7.0,"request_id":{"x":[1]}}})", "application/json") == ignored);
  CHECK(golden_fp(R"({"amount":100,"currency":"eur","meta":{"order":7}})", "application/json") == ignored);
  //   P "14:stripe-account\n0:\n1:1\n24:{"amount":100,"meta":{}}\n"
  CHECK(golden_fp(R"({"amount":100,"meta":{"request_id":"req_2"}})", "application/json") ==
        "6a09f71aaa0d02aa33751c3944eafe9b050a7dfc82289b9e16e3d9ad5e84116d");
  // The same pointer leaves a form pair out:
  //   P "14:stripe-account\n0:\n1:2\n35:7:/amount\n3:100\n11:/meta/order\n1:7\n\n"
  CHECK(golden_fp("meta[request_id]=req_1&meta[order]=7&amount=100", "application/x-www-form-urlencoded") ==
        "5c524bd0c62bb2d05ec50963086e836e97e19f53b8ab86d5ba0bc9fac4e90015");
}

TEST_CASE("golden: raw and malformed bodies, computed apart from this code") {
  // A media type neither JSON nor form: kind 3 and the bytes as sent (the
  // length counts bytes: the euro sign is three).
  //   P "14:stripe-account\n0:\n1:3\n27:currency=eur&amount=100\n\xe2\x82\xac\n"
  CHECK(golden_fp("currency=eur&amount=100\n\xe2\x82\xac", "text/plain; charset=utf-8") ==
        "1ef55ffd755e1e5aa72404c8696e573a57dee406a66154fed2679d5853ebdaa5");
  CHECK(golden_fp("currency=eur&amount=100\n\xe2\x82\xac", "") ==
        "1ef55ffd755e1e5aa72404c8696e573a57dee406a66154fed2679d5853ebdaa5");
  // Declared JSON but not JSON: raw too, kind 3, the bytes as sent with
  // their spaces (nothing is made canonical).
  //   P "14:stripe-account\n0:\n1:3\n33:{"amount": 100, "currency": "eur"\n"
  CHECK(golden_fp(R"({"amount": 100, "currency": "eur")", "application/json") ==
        "68587f437f6f9b62ac9e0135eb5f0dea1f0af78631d5857adde7bd90fa144104");
}

TEST_CASE("a configured header sent more than once counts with every copy") {
  // The upstream may read the first copy or the last: two calls that differ
  // only in a later copy are two calls. The copies are joined by LF, which no
  // field value holds, so two copies are never one header that lists both
  // (a server reading the first copy sees "acct_A" in one, "acct_A, acct_B"
  // in the other).
  auto const body = R"({"currency":"eur","amount":100})";
  auto const a_b = fp(body, "application/json", {{"Stripe-Account", "acct_A"}, {"stripe-account", " acct_B\t"}});
  CHECK(a_b != fp(body, "application/json", {{"Stripe-Account", "acct_A"}, {"Stripe-Account", "acct_C"}}));
  CHECK(a_b != fp(body, "application/json", {{"Stripe-Account", "acct_A"}}));
  CHECK(a_b != fp(body, "application/json", {{"Stripe-Account", "acct_B"}, {"Stripe-Account", "acct_A"}}));
  CHECK(a_b != fp(body, "application/json", {{"Stripe-Account", "acct_A, acct_B"}}));
  CHECK(a_b == fp(body, "application/json", {{"Stripe-Account", "acct_A"}, {"X-Other", "1"}, {"STRIPE-ACCOUNT", "acct_B"}}));
  // Golden, computed apart from this code as the cases above:
  //   P "14:stripe-account\n14:=acct_A<LF>acct_B\n1:1\n31:{"amount":100,"currency":"eur"}\n"
  CHECK(golden_fp(body, "application/json", {{"Stripe-Account", "acct_A"}, {"Stripe-Account", "acct_B"}}) ==
        "fea34dcf61e300415f1997be253036bc61cb51016e85d2a974d1355a86201dc9");
  // Sent once, it is as it was: the digest of the present-header case.
  CHECK(golden_fp(body, "application/json", {{"Stripe-Account", "acct_123"}}) ==
        "c28e183b4e53c8c8aa06e07c1b63f4f9d347c550e6d14c00e741921ea9b2aab2");
}

TEST_CASE("a JSON object that names a member twice is flagged: the call has no single reading") {
  // Receivers differ on which of the two counts (the parser keeps the last;
  // others keep the first): the proxy refuses such a write before anything
  // is sent, on this flag.
  auto flagged = [](std::string_view body) {
    FingerprintInput input{.method = "POST", .scheme = "https", .host = "api.stripe.com", .port = 443,
                           .target = "/v1/charges", .content_type = "application/json", .body = body};
    auto const result = fingerprint(input, charge_tool());
    CHECK(result.hex.size() == 64);
    CHECK(result.body_kind == BodyKind::json);
    CHECK_FALSE(result.malformed);
    return result.repeated_names;
  };
  for (std::string_view body : {R"({"amount":1,"amount":2})", R"({"x":{"a":1,"a":2}})", R"([{"a":1},{"b":1,"b":2}])",
                                R"({"a":1,"\u0061":2})", R"({"amount":1,"meta":{"request_id":1,"request_id":2}})",
                                R"({"a":[{"b":{}},{"c":[{"d":1,"d":1}]}]})"}) {
    CAPTURE(body);
    CHECK(flagged(body));
  }
  // The same name in two objects, or at two depths, is no repeat.
  for (std::string_view body : {R"({"a":{"v":1},"b":{"v":2}})", R"({"a":{"a":{"a":1}}})", R"([{"a":1},{"a":2}])",
                                R"({})", R"({"a":{},"b":[]})", R"({"ab":1,"a":2,"b":3})"}) {
    CAPTURE(body);
    CHECK_FALSE(flagged(body));
  }
  // A form is not flagged: its canonical form keeps every pair in order, so
  // two forms that differ in either copy are two calls, and a repeated key
  // is a list to many servers (MediaUrl=a&MediaUrl=b).
  FingerprintInput form{.method = "POST", .scheme = "https", .host = "api.stripe.com", .port = 443,
                        .target = "/v1/charges", .content_type = "application/x-www-form-urlencoded",
                        .body = "amount=1000&amount=1"};
  CHECK_FALSE(fingerprint(form, charge_tool()).repeated_names);
  CHECK(fp("amount=1000&amount=1", "application/x-www-form-urlencoded") !=
        fp("amount=1000&amount=2", "application/x-www-form-urlencoded"));
  CHECK(fp("amount=1000&amount=1", "application/x-www-form-urlencoded") !=
        fp("amount=1&amount=1", "application/x-www-form-urlencoded"));
  // The body as read (the last kept) is what a log or a template shows.
  FingerprintInput input{.method = "POST", .scheme = "https", .host = "api.stripe.com", .port = 443,
                         .target = "/v1/charges", .content_type = "application/json",
                         .body = R"({"amount":100,"amount":200,"currency":"eur"})"};
  auto const result = fingerprint(input, charge_tool());
  REQUIRE(result.body);
  CHECK(result.body->at("amount") == 200);
  // Golden, computed apart from this code: the canonical body, the last kept.
  //   P "14:stripe-account\n0:\n1:1\n31:{"amount":200,"currency":"eur"}\n"
  CHECK(golden_fp(input.body, "application/json") == "111ae3d048ffc04dccf4df929246b10d409a474760edfe2f9bf562ed69d3e02d");
}

TEST_CASE("golden: an MCP tools/call, its name and arguments only, computed apart from this code") {
  // An MCP tool's tools/call body is, in place of canonical JSON (kind 1
  // still): "mcp tools/call\n", the tool name's length, ":", the name and
  // "\n", then canonical params.arguments with no "\n" of its own. The
  // JSON-RPC id, params._meta and jsonrpc are not in it. The tool
  // configures no headers, so there are no header fields.
  //   "idemgate-fingerprint-v3\n12:create_issue\n4:POST\n27:https://mcp.example.com/mcp\n1:1\n"
  //   "71:mcp tools/call\n12:create_issue\n{"labels":["b","a"],"n":1,"title":"Bug"}\n"
  Tool mcp;
  mcp.name = "create_issue";
  mcp.effect = Effect::write;
  mcp.match.mcp_tool = "create_issue";
  auto const call = [&](std::string_view body) {
    return golden_fp(body, "application/json", {{"Mcp-Session-Id", "s-1"}}, "/mcp", "mcp.example.com", mcp);
  };
  auto const with_arguments = "415aeeb4d16bdac117d5efe3c414c0ff151eb8d08b06b173587a4b50ec6edfff";
  for (std::string_view body : {
           R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_issue","arguments":{"title":"Bug","n":1.0,"labels":["b","a"]},"_meta":{"progressToken":"p1"}}})",
           R"({"params":{"arguments":{"labels":["b","a"],"n":1,"title":"Bug"},"name":"create_issue"},"method":"tools/call","id":"req-b","jsonrpc":"2.0"})",
       }) {
    CAPTURE(body);
    CHECK(call(body) == with_arguments);
  }
  // Arguments absent, {} or null are the same call: "{}".
  //   ... "1:1\n33:mcp tools/call\n12:create_issue\n{}\n"
  for (std::string_view body : {
           R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue"}})",
           R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_issue","arguments":{}}})",
           R"({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"create_issue","arguments":null}})",
       }) {
    CAPTURE(body);
    CHECK(call(body) == "51dc2244e8e8e42e5b4a11430d159a11a3d8c478a4e2fe676c927a8d9e4ba0a4");
  }
}
