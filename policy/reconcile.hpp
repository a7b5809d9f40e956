// The pure parts of reconciling an unknown outcome and of reading an answer:
// expanding reconcile.query.url, judging the lookup's answer, and pulling the
// receipt (the provider's id) out of a response body.
#pragma once

#include "policy/tool.hpp"

#include <boost/json/value.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace idemgate::policy {

// What a URL template is filled with.
struct TemplateValues {
  std::string_view key;                        // {key}: the intent's idempotency key
  std::string_view receipt;                    // {receipt}: the stored receipt, if any
  const boost::json::value* body = nullptr;    // {/json/pointer}: the original request body
};

// What is wrong with a template ("{key}", "{receipt}", "{/ptr}" allowed), or nullopt.
std::optional<std::string> url_template_error(std::string_view url_template);

// The URL with every placeholder replaced by its value, percent-encoded for a
// URL component. nullopt when a placeholder has no value (a missing pointer,
// an empty receipt): a lookup with a hole in it would find the wrong thing.
std::optional<std::string> expand_url_template(std::string_view url_template, const TemplateValues& values);

// Did the lookup find the earlier write? (reconcile.query.found exists in the
// JSON answer and is not null.) A body that is not JSON is not found.
bool query_found(const ReconcileQuery& query, std::string_view answer_body) noexcept;

// The receipt at tool.receipt in a JSON answer: strings as they are, numbers
// and other values as compact JSON; nullopt when absent or not JSON.
std::optional<std::string> receipt_of(const Tool& tool, std::string_view answer_body) noexcept;

}  // namespace idemgate::policy
