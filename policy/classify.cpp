// Status, headers and transport outcome to a typed class (see classify.hpp
// for the order the rules apply in and why).
#include "policy/classify.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <string>
#include <vector>

namespace idemgate::policy {
namespace {

using namespace std::chrono;

AnswerClass class_of_status(int status, bool has_retry_after) noexcept {
  if (status >= 200 && status < 400) return AnswerClass::ok;
  switch (status) {
    case 429: return AnswerClass::rate_limited;
    case 503: return has_retry_after ? AnswerClass::rate_limited : AnswerClass::transient;
    case 500: case 502: case 504: return AnswerClass::transient;
    case 401: return AnswerClass::auth;
    case 403: return AnswerClass::forbidden;
    case 404: return AnswerClass::not_found;
    case 400: case 422: return AnswerClass::validation;
    case 409: return AnswerClass::conflict;
    case 402: return AnswerClass::money_rejected;
    default: return AnswerClass::unclassified;
  }
}

bool rule_applies(const ClassifyRule& rule, const Answer& answer) noexcept {
  if (rule.status && *rule.status != answer.status) return false;
  if (rule.header.empty()) return true;
  const auto value = find_header(answer.headers, rule.header);
  return value && (rule.header_value.empty() || iequals(*value, rule.header_value));
}

std::optional<int> parse_int(std::string_view text) noexcept {
  int value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<unsigned> month_number(std::string_view name) noexcept {
  static constexpr std::array<std::string_view, 12> months{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  for (unsigned i = 0; i < months.size(); ++i)
    if (months[i] == name) return i + 1;
  return std::nullopt;
}

// The three forms RFC 9110 section 5.6.7 requires a recipient to accept:
//   Sun, 06 Nov 1994 08:49:37 GMT   (IMF-fixdate)
//   Sunday, 06-Nov-94 08:49:37 GMT  (RFC 850)
//   Sun Nov  6 08:49:37 1994        (asctime)
std::optional<system_clock::time_point> parse_http_date(std::string_view text) noexcept {
  std::array<std::string_view, 9> tokens;
  std::size_t count = 0;
  std::size_t start = std::string_view::npos;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    const bool separator = i == text.size() || text[i] == ' ' || text[i] == ',' || text[i] == '-' || text[i] == ':';
    if (!separator && start == std::string_view::npos) start = i;
    if (separator && start != std::string_view::npos) {
      if (count == tokens.size()) return std::nullopt;
      tokens[count++] = text.substr(start, i - start);
      start = std::string_view::npos;
    }
  }
  std::optional<unsigned> month;
  std::optional<int> day, year, hour, minute, second;
  if (count == 7 && (month = month_number(tokens[1]))) {  // asctime
    day = parse_int(tokens[2]), hour = parse_int(tokens[3]), minute = parse_int(tokens[4]);
    second = parse_int(tokens[5]), year = parse_int(tokens[6]);
  } else if (count == 8 && tokens[7] == "GMT" && (month = month_number(tokens[2]))) {
    day = parse_int(tokens[1]), year = parse_int(tokens[3]), hour = parse_int(tokens[4]);
    minute = parse_int(tokens[5]), second = parse_int(tokens[6]);
    if (year && tokens[3].size() == 2) *year += *year < 70 ? 2000 : 1900;  // RFC 850 two-digit year
  } else {
    return std::nullopt;
  }
  if (!day || !year || !hour || !minute || !second || *hour > 23 || *minute > 59 || *second > 60)
    return std::nullopt;
  const year_month_day date{std::chrono::year{*year}, std::chrono::month{*month},
                            std::chrono::day{static_cast<unsigned>(*day)}};
  if (!date.ok()) return std::nullopt;
  return sys_days{date} + hours{*hour} + minutes{*minute} + seconds{*second};
}

}  // namespace

bool is_retryable(AnswerClass answer_class) noexcept {
  return answer_class == AnswerClass::rate_limited || answer_class == AnswerClass::transient;
}

std::optional<Duration> parse_retry_after(std::string_view value, system_clock::time_point now) noexcept {
  if (value.empty()) return std::nullopt;
  if (value.front() >= '0' && value.front() <= '9') {
    long long delay_seconds = 0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), delay_seconds);
    if (ec == std::errc::result_out_of_range) return duration_cast<Duration>(hours(24 * 365));
    if (ec != std::errc{} || ptr != value.data() + value.size()) return std::nullopt;
    return duration_cast<Duration>(std::min(seconds(delay_seconds), duration_cast<seconds>(hours(24 * 365))));
  }
  const auto date = parse_http_date(value);
  if (!date) return std::nullopt;
  return *date <= now ? Duration::zero() : duration_cast<Duration>(*date - now);
}

Classification classify(const Answer& answer, const Tool& tool, system_clock::time_point now) noexcept {
  Classification result;
  if (answer.outcome == TransportOutcome::connect_failed) {
    result.answer_class = AnswerClass::transient;
    result.should_retry = true;
    result.reason = "connect failed, nothing sent";
    return result;
  }
  if (answer.outcome == TransportOutcome::sent_no_answer) {
    result.answer_class = AnswerClass::unknown;
    result.should_retry = tool.effect == Effect::read;
    result.reason = "sent, no complete answer";
    return result;
  }

  if (const auto header = find_header(answer.headers, "Retry-After")) {
    // Never cut short: a wait past max_retry_after is answered to the agent
    // in full (decide()), not held and not shortened.
    if ((result.retry_after = parse_retry_after(*header, now)) && *result.retry_after > tool.retry.max_retry_after)
      result.retry_after_capped = true;
  }
  const auto status_class = class_of_status(answer.status, result.retry_after.has_value());

  const auto rule = std::find_if(tool.classify.begin(), tool.classify.end(),
                                 [&](const ClassifyRule& r) { return rule_applies(r, answer); });
  const auto should_retry_header =
      tool.should_retry_header.empty() ? std::nullopt : find_header(answer.headers, tool.should_retry_header);
  const bool success = status_class == AnswerClass::ok;
  // A 5xx from a provider that does not deduplicate on the key may have
  // applied the write: re-sending could apply it twice ("a 503 becomes two
  // CRM rows"), so the outcome is unknown, for money and plain writes alike.
  const bool key_not_honoured =
      tool.effect != Effect::read && !tool.idempotency.honoured && answer.status >= 500 && answer.status < 600;

  if (rule != tool.classify.end()) {
    result.answer_class = rule->answer_class;
    result.reason = "tool classify rule";
  } else if (!success && should_retry_header && iequals(*should_retry_header, "true")) {
    result.answer_class = is_retryable(status_class) ? status_class : AnswerClass::transient;
    result.reason = "should-retry header true";
  } else if (!success && should_retry_header && iequals(*should_retry_header, "false")) {
    result.answer_class = !is_retryable(status_class) && status_class != AnswerClass::unclassified
                              ? status_class
                          : tool.effect == Effect::money ? AnswerClass::money_rejected
                                                         : AnswerClass::conflict;
    result.reason = "should-retry header false";
  } else if (key_not_honoured) {
    result.answer_class = AnswerClass::unknown;
    result.reason = "5xx on a write whose key the provider does not honour";
  } else {
    result.answer_class = status_class;
    result.reason = "status table";
  }
  result.should_retry = is_retryable(result.answer_class);
  return result;
}

}  // namespace idemgate::policy
