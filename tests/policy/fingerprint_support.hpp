// What the fingerprint tests share: the Stripe-like charge tool they hash
// against, and one request's fingerprint under the default (empty) key.
#pragma once

#include "policy/fingerprint.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace idemgate::policy::test {

inline Tool charge_tool() {
  Tool tool;
  tool.name = "stripe.create_charge";
  tool.effect = Effect::money;
  tool.fingerprint.ignore = {"/meta/request_id"};
  tool.fingerprint.ignore_query = {"trace"};
  tool.fingerprint.headers = {"Stripe-Account", "Idempotency-Key"};
  return tool;
}

inline std::string fp(std::string_view body, std::string_view content_type = "application/json",
               std::vector<Header> headers = {}, std::string_view target = "/v1/charges",
               std::string_view host = "api.stripe.com", std::uint16_t port = 443, const Tool& tool = charge_tool()) {
  FingerprintInput input{.method = "POST", .scheme = "https", .host = host, .port = port, .target = target,
                         .content_type = content_type, .body = body, .headers = headers};
  const auto result = fingerprint(input, tool);
  REQUIRE(result.hex.size() == 64);
  return result.hex;
}

}  // namespace idemgate::policy::test
