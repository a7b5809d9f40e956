// Fingerprint properties over a seeded random generator, plus the fixed
// normalisation rules (numbers, target, form syntax, malformed bodies). The
// digests pinned against a computation apart from this code are in
// fingerprint_golden_test.cpp.
#include "policy/fingerprint.hpp"
#include "fingerprint_support.hpp"

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
using namespace idemgate::policy::test;
namespace json = boost::json;

namespace {

constexpr int rounds = 200;

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

TEST_CASE("numbers are normalised: 1.0 == 1, 1e2 == 100, strings are exact") {
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

TEST_CASE("configured headers take part, others do not") {
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

TEST_CASE("other content types are raw bytes, MCP request ids are ignored") {
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
