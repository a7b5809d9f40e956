// Fingerprint properties over a seeded random generator, plus the fixed
// normalisation rules (numbers, target, form syntax, malformed bodies).
#include "policy/fingerprint.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace idemgate::policy;
namespace json = boost::json;

namespace {

constexpr int rounds = 200;

Tool charge_tool() {
  Tool tool;
  tool.name = "stripe.create_charge";
  tool.effect = Effect::money;
  tool.fingerprint.ignore = {"/meta/request_id"};
  tool.fingerprint.ignore_query = {"trace"};
  tool.fingerprint.headers = {"Stripe-Account", "Idempotency-Key"};
  return tool;
}

std::string fp(std::string_view body, std::string_view content_type = "application/json",
               std::vector<Header> headers = {}, std::string_view target = "/v1/charges",
               std::string_view host = "api.stripe.com", std::uint16_t port = 443, const Tool& tool = charge_tool()) {
  FingerprintInput input{.method = "POST", .scheme = "https", .host = host, .port = port, .target = target,
                         .content_type = content_type, .body = body, .headers = headers};
  const auto result = fingerprint(input, tool);
  REQUIRE(result.hex.size() == 64);
  return result.hex;
}

const char* const key_pool[] = {"amount", "currency", "customer", "a", "b", "zz", "Z", "é", "x y"};

json::value random_value(std::mt19937& random, int depth) {
  switch (random() % (depth > 2 ? 5 : 7)) {
    case 0: return json::value(static_cast<std::int64_t>(random() % 100000) - 500);
    case 1: return json::value(static_cast<double>(random() % 1000) / 8.0);
    case 2: return json::value("s" + std::to_string(random() % 50));
    case 3: return json::value(random() % 2 == 0);
    case 4: return json::value(nullptr);
    case 5: {
      json::array array;
      for (unsigned i = random() % 4; i > 0; --i) array.push_back(random_value(random, depth + 1));
      return array;
    }
    default: {
      json::object object;
      for (unsigned i = 1 + random() % 4; i > 0; --i)
        object[key_pool[random() % std::size(key_pool)]] = random_value(random, depth + 1);
      return object;
    }
  }
}

json::object random_body(std::mt19937& random) {
  json::object body;
  body["amount"] = static_cast<std::int64_t>(random() % 10000);
  body["currency"] = "usd";
  body["meta"] = json::object{{"request_id", "req_" + std::to_string(random())}, {"order", 7}};
  for (unsigned i = random() % 5; i > 0; --i) body[key_pool[random() % std::size(key_pool)]] = random_value(random, 1);
  return body;
}

// The same value with every object's members in a random order.
json::value shuffled(const json::value& value, std::mt19937& random) {
  if (const auto* array = value.if_array()) {
    json::array out;
    for (const auto& item : *array) out.push_back(shuffled(item, random));
    return out;
  }
  if (const auto* object = value.if_object()) {
    std::vector<const json::key_value_pair*> members;
    for (const auto& member : *object) members.push_back(&member);
    std::shuffle(members.begin(), members.end(), random);
    json::object out;
    for (const auto* member : members) out[member->key()] = shuffled(member->value(), random);
    return out;
  }
  return value;
}

// A pointer to a random leaf outside /meta/request_id, and a changed copy.
json::value with_one_leaf_changed(json::value value, std::mt19937& random) {
  json::value* node = &value;
  for (;;) {
    if (auto* object = node->if_object(); object && !object->empty()) {
      auto it = object->begin() + static_cast<std::ptrdiff_t>(random() % object->size());
      if (it->key() == "request_id") it = object->begin() + (it == object->begin() ? 1 : 0);
      if (it == object->end() || it->key() == "request_id") return json::value("no-leaf-" + std::to_string(random()));
      node = &it->value();
    } else if (auto* array = node->if_array(); array && !array->empty()) {
      node = &(*array)[random() % array->size()];
    } else {
      break;
    }
  }
  // Replace with a value of a different canonical text.
  if (node->is_string()) *node = std::string(node->get_string()) + "!";
  else if (node->is_int64()) *node = node->get_int64() + 1;
  else if (node->is_double()) *node = node->get_double() + 0.5;
  else if (node->is_bool()) *node = !node->get_bool();
  else *node = "was-" + json::serialize(*node);
  return value;
}

std::string percent_encode_some(std::string_view text, std::mt19937& random) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    const bool must = c == '&' || c == '=' || c == '+' || c == '%' || c == '[' || c == ']' || c >= 0x80;
    if (c == ' ') out += random() % 2 ? "+" : "%20";
    else if (must || random() % 3 == 0) (out += '%', out += hex[c >> 4], out += hex[c & 15]);
    else out += static_cast<char>(c);
  }
  return out;
}

}  // namespace

TEST_CASE("property: reordering JSON keys leaves the fingerprint unchanged") {
  std::mt19937 random(20261130);
  for (int i = 0; i < rounds; ++i) {
    const json::value body = random_body(random);
    const auto a = json::serialize(shuffled(body, random)), b = json::serialize(shuffled(body, random));
    CHECK_MESSAGE(fp(a) == fp(b), a << "\n" << b);
  }
}

TEST_CASE("property: changing an ignored field leaves the fingerprint unchanged") {
  std::mt19937 random(7);
  for (int i = 0; i < rounds; ++i) {
    json::value body = random_body(random);
    const auto before = fp(json::serialize(body));
    body.as_object()["meta"].as_object()["request_id"] = random_value(random, 1);
    CHECK(fp(json::serialize(body)) == before);
  }
}

TEST_CASE("the parsed body is kept as sent: ignored members are left out of the hash only") {
  std::string const sent = R"({"amount":500,"meta":{"request_id":"r1","tag":"t"}})";
  FingerprintInput input{.method = "POST", .scheme = "https", .host = "api.stripe.com", .port = 443,
                         .target = "/v1/charges", .content_type = "application/json", .body = sent};
  Tool plain = charge_tool();
  plain.fingerprint.ignore.clear();
  for (const Tool& tool : {charge_tool(), plain}) {
    auto const result = fingerprint(input, tool);
    REQUIRE(result.body);
    CHECK(*result.body == json::parse(sent));  // require: and lookups read the whole body
  }
  // The ignored member really is out of the hash, and only it.
  CHECK(fp(sent) == fp(R"({"amount":500,"meta":{"tag":"t"}})"));
  CHECK(fp(sent) != fp(R"({"amount":500,"meta":{"request_id":"r1"}})"));
}

TEST_CASE("property: changing the Idempotency-Key leaves the fingerprint unchanged") {
  std::mt19937 random(11);
  for (int i = 0; i < rounds; ++i) {
    const auto body = json::serialize(random_body(random));
    const auto key_a = std::to_string(random()), key_b = std::to_string(random());
    CHECK(fp(body, "application/json", {{"Idempotency-Key", key_a}}) ==
          fp(body, "application/json", {{"idempotency-key", key_b}, {"X-Other", "1"}}));
  }
}

TEST_CASE("property: changing any other value changes the fingerprint") {
  std::mt19937 random(13);
  for (int i = 0; i < rounds; ++i) {
    const json::value body = random_body(random);
    const auto changed = with_one_leaf_changed(body, random);
    CHECK_MESSAGE(fp(json::serialize(body)) != fp(json::serialize(changed)),
                  json::serialize(body) << "\n" << json::serialize(changed));
  }
}

TEST_CASE("property: reordering and re-encoding form pairs leaves the fingerprint unchanged") {
  std::mt19937 random(17);
  const char* const keys[] = {"amount", "currency", "metadata[order]", "metadata[note]", "card[number]", "description"};
  for (int i = 0; i < rounds; ++i) {
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const char* key : keys)
      if (random() % 3 != 0) pairs.emplace_back(key, "v " + std::to_string(random() % 9) + "&é=+");
    auto encode = [&] {
      std::shuffle(pairs.begin(), pairs.end(), random);
      std::string body;
      for (const auto& [k, v] : pairs) body += (body.empty() ? "" : "&") + percent_encode_some(k, random) + "=" + percent_encode_some(v, random);
      return body;
    };
    const auto a = encode(), b = encode();
    CHECK_MESSAGE(fp(a, "application/x-www-form-urlencoded") == fp(b, "application/x-www-form-urlencoded"), a << "\n" << b);
    if (!pairs.empty()) {
      pairs[random() % pairs.size()].second += "x";
      CHECK(fp(encode(), "application/x-www-form-urlencoded") != fp(a, "application/x-www-form-urlencoded"));
    }
  }
}

TEST_CASE("numbers are normalised: 1.0 == 1, 1e2 == 100; strings are exact") {
  CHECK(fp(R"({"amount":1.0})") == fp(R"({"amount":1})"));
  CHECK(fp(R"({"amount":1e2})") == fp(R"({"amount":100})"));
  CHECK(fp(R"({"amount":0.5})") == fp(R"({"amount":5e-1})"));
  CHECK(fp(R"({"amount":"1"})") != fp(R"({"amount":1})"));
  CHECK(fp(R"({"s":"a"})") != fp(R"({"s":"A"})"));
  CHECK(fp(R"({"a": [1, 2]})") != fp(R"({"a":[2,1]})"));
  CHECK(fp(" {\"a\" : 1 } ") == fp(R"({"a":1})"));
}

TEST_CASE("the target is normalised: host case, default port, query order, ignored parameters") {
  const auto base = fp("{}", "application/json", {}, "/v1/charges?a=1&b=2", "api.stripe.com", 443);
  CHECK(fp("{}", "application/json", {}, "/v1/charges?b=2&a=1", "API.Stripe.COM", 0) == base);
  CHECK(fp("{}", "application/json", {}, "/v1/charges?b=2&trace=9&a=1", "api.stripe.com", 443) == base);
  CHECK(fp("{}", "application/json", {}, "/v1/charges?a=1&b=%32", "api.stripe.com", 443) == base);
  CHECK(fp("{}", "application/json", {}, "/v1/charges?a=1&b=3", "api.stripe.com", 443) != base);
  CHECK(fp("{}", "application/json", {}, "/v1/charges?a=1&b=2", "api.stripe.com", 8443) != base);
  CHECK(fp("{}", "application/json", {}, "/v1/refunds?a=1&b=2", "api.stripe.com", 443) != base);
}

TEST_CASE("configured headers take part; others do not") {
  const auto body = R"({"a":1})";
  CHECK(fp(body, "application/json", {{"Stripe-Account", "acct_1"}}) != fp(body, "application/json", {{"Stripe-Account", "acct_2"}}));
  CHECK(fp(body, "application/json", {{"User-Agent", "x"}}) == fp(body, "application/json", {{"User-Agent", "y"}}));
}

TEST_CASE("Stripe form bracket syntax maps to JSON pointers, ignore applies") {
  const auto pairs = parse_form("metadata%5Border%5D=7&expand[]=a&expand[]=b&name=J+Doe&bad=%zz");
  REQUIRE(pairs.size() == 5);
  CHECK(pairs[0].pointer == "/metadata/order");
  CHECK(pairs[0].value == "7");
  CHECK(pairs[1].pointer == "/expand/");
  CHECK(pairs[3].value == "J Doe");
  CHECK(pairs[4].value == "%zz");

  Tool tool = charge_tool();
  tool.fingerprint.ignore = {"/metadata/request_id"};
  const auto form = [&](std::string_view body) { return fp(body, "application/x-www-form-urlencoded", {}, "/v1/charges", "api.stripe.com", 443, tool); };
  CHECK(form("amount=5&metadata[request_id]=1") == form("metadata[request_id]=2&amount=5"));
  CHECK(form("expand[]=a&expand[]=b") != form("expand[]=b&expand[]=a"));  // a list keeps its order

  const auto parsed = fingerprint({.method = "POST", .host = "h", .target = "/", .content_type = "application/x-www-form-urlencoded; charset=utf-8",
                                   .body = "amount=5&metadata[order]=7&expand[]=a"}, tool);
  REQUIRE(parsed.body);
  CHECK(json::serialize(*parsed.body) == R"({"amount":"5","metadata":{"order":"7"},"expand":["a"]})");
  CHECK(parsed.body_kind == BodyKind::form);
}

TEST_CASE("a malformed JSON body is hashed as raw bytes and flagged, never a crash") {
  const auto tool = charge_tool();
  for (std::string_view body : {"{\"amount\": 1", "not json", "{\"a\":1}}", "\xff\xfe"}) {
    const auto result = fingerprint({.method = "POST", .host = "h", .target = "/", .content_type = "application/json", .body = body}, tool);
    CHECK(result.malformed);
    CHECK(result.body_kind == BodyKind::raw);
    CHECK(result.hex.size() == 64);
    CHECK_FALSE(result.body);
  }
  CHECK(fp("{\"amount\": 1") != fp("{\"amount\": 2"));
}

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

TEST_CASE("the media type is read past spaces and tabs around it, in any case") {
  // RFC 9110's optional whitespace before a parameter's ";" is spaces or
  // tabs; a JSON or form body behind either is still canonical.
  const auto json = fp(R"({"amount":1,"currency":"eur"})");
  for (std::string_view type : {"application/json\t; charset=utf-8", "application/json \t;charset=utf-8",
                                "\tApplication/JSON", "application/json\t", "application/json \t "}) {
    CAPTURE(type);
    CHECK(fp(R"({"currency":"eur","amount":1})", type) == json);
  }
  CHECK(fp(R"({"b":1,"a":2})", "application/problem+json\t;x=y") == fp(R"({"a":2,"b":1})", "application/problem+json"));
  const auto form = fp("amount=1&currency=eur", "application/x-www-form-urlencoded");
  for (std::string_view type : {"application/x-www-form-urlencoded\t;charset=utf-8",
                                "\t application/x-www-form-urlencoded \t"}) {
    CAPTURE(type);
    CHECK(fp("currency=eur&amount=1", type) == form);
  }
  // Whitespace inside the media type is no media type of these.
  CHECK(fp(R"({"b":1,"a":2})", "application/ json") != fp(R"({"a":2,"b":1})", "application/ json"));
}

TEST_CASE("other content types are raw bytes; MCP request ids are ignored") {
  CHECK(fp("a=1&b=2", "text/plain") != fp("b=2&a=1", "text/plain"));
  Tool mcp;
  mcp.name = "create_issue";
  mcp.match.mcp_tool = "create_issue";
  const auto call = [&](std::string_view body) { return fp(body, "application/json", {}, "/mcp", "mcp.example.com", 443, mcp); };
  CHECK(call(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"t":"x"}}})") ==
        call(R"({"jsonrpc":"2.0","id":"b7","method":"tools/call","params":{"name":"create_issue","arguments":{"t":"x"}}})"));
}

TEST_CASE("missing_required lists absent pointers") {
  Tool tool;
  tool.require = {"/amount", "/currency", "/metadata/order", "/items/0"};
  const auto body = json::parse(R"({"amount":0,"metadata":{"order":null},"items":[]})");
  CHECK(missing_required(tool, &body) == std::vector<std::string>{"/currency", "/items/0"});
  CHECK(missing_required(tool, nullptr).size() == 4);
}

TEST_CASE("a target that is not valid origin-form is escaped, never fails") {
  CHECK(fp("{}", "application/json", {}, "/v1/a b") != fp("{}", "application/json", {}, "/v1/a  b"));
  CHECK(fp("{}", "application/json", {}, "not-a-path%") != fp("{}", "application/json", {}, "/v1/charges"));
  CHECK(fp("{}", "application/json", {}, "/v1/%zz") == fp("{}", "application/json", {}, "/v1/%zz"));
}

namespace {

// The canonical form as it was first written, through Boost.JSON's
// serializer for every string and key: the bytes every stored fingerprint
// was made of, which canonical_json must keep.
std::string canonical_by_serializer(const json::value& value) {
  switch (value.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return value.get_bool() ? "true" : "false";
    case json::kind::int64: return std::to_string(value.get_int64());
    case json::kind::uint64: return std::to_string(value.get_uint64());
    case json::kind::double_: {
      double const d = value.get_double();
      if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.2e18) return std::to_string(static_cast<long long>(d));
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%.17g", d);
      return buffer;
    }
    case json::kind::string: return json::serialize(value.get_string());
    case json::kind::array: {
      std::string out = "[";
      for (const auto& item : value.get_array()) out += (out.size() > 1 ? "," : "") + canonical_by_serializer(item);
      return out + "]";
    }
    case json::kind::object: {
      std::vector<const json::key_value_pair*> members;
      for (const auto& member : value.get_object()) members.push_back(&member);
      std::sort(members.begin(), members.end(), [](const auto* a, const auto* b) { return a->key() < b->key(); });
      std::string out = "{";
      for (const auto* member : members)
        out += (out.size() > 1 ? "," : "") + json::serialize(member->key()) + ":" + canonical_by_serializer(member->value());
      return out + "}";
    }
  }
  return {};
}

}  // namespace

TEST_CASE("canonical_json writes the bytes the serializer-built form did, for every byte in a string") {
  std::mt19937 random(20261206);
  for (int round = 0; round < rounds; ++round) {
    auto const body = random_body(random);
    CHECK(canonical_json(body) == canonical_by_serializer(body));
  }
  // Every byte value in a key and in a string (escapes, controls, DEL,
  // UTF-8 and bytes that are not), at every offset of a 24-byte string (the
  // first, second and third eight-byte words), alone and with a second one.
  for (int b = 0; b < 256; ++b) {
    for (std::size_t at = 0; at < 24; ++at) {
      std::string text(24, 'a');
      text[at] = static_cast<char>(b);
      std::string twice = text;
      twice[(at + 9) % 24] = '"';
      for (std::string const& t : {text, twice, text.substr(0, at + 1)}) {
        json::value const value = json::object{{t, json::array{t}}};
        CHECK(canonical_json(value) == canonical_by_serializer(value));
      }
    }
  }
  // Integers at their ends, integral doubles about the 9.2e18 cut, -0.0.
  json::value const numbers = json::array{std::numeric_limits<std::int64_t>::min(),
                                          std::numeric_limits<std::int64_t>::max(),
                                          std::numeric_limits<std::uint64_t>::max(),
                                          9.2e18, -9.2e18, 9.1e18, -9.1e18, 1e300, -0.0, 0.1, 2.5};
  CHECK(canonical_json(numbers) == canonical_by_serializer(numbers));
  // And fixed bytes, whatever the serializer of the day writes.
  json::value const fixed = json::object{{"z\x01", json::array{"\"\\/\b\f\n\r\t\x7f\xc3\xa9", -1, 1.5}}, {"a", true}};
  CHECK(canonical_json(fixed) == "{\"a\":true,\"z\\u0001\":[\"\\\"\\\\/\\b\\f\\n\\r\\t\x7f\xc3\xa9\",-1,1.5]}");
}

TEST_CASE("fingerprints are HMAC-SHA256 under the deployment's key") {
  FingerprintInput in{.method = "POST", .scheme = "https", .host = "api.stripe.com", .port = 443,
                      .target = "/v1/charges", .content_type = "application/json",
                      .body = R"({"card":{"number":"4242424242424242"}})"};
  in.key = "key-one-0123456789abcdef0123456789";
  const auto one = fingerprint(in, charge_tool()).hex;
  CHECK(one.size() == 64);
  CHECK(fingerprint(in, charge_tool()).hex == one);
  in.key = "key-two-0123456789abcdef0123456789";
  const auto two = fingerprint(in, charge_tool()).hex;
  CHECK(two.size() == 64);
  CHECK(two != one);
  in.key = "";
  CHECK(fingerprint(in, charge_tool()).hex != one);
}
