// The reconcile lookup (see query_reconcile.hpp).
#include "proxy/query_reconcile.hpp"

#include "ledger/redact.hpp"
#include "policy/credentials.hpp"
#include "policy/json_pointer.hpp"
#include "policy/reconcile.hpp"
#include "proxy/exchange.hpp"
#include "ledger/executor.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/json.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;

namespace {

// A value the ledger holds only redacted: looking it up would ask for the
// wrong thing.
bool names_a_redacted_value(std::string_view url) {
  return url.find("%5Bredacted%5D") != std::string_view::npos ||
         url.find(ledger::redacted_marker) != std::string_view::npos;
}

}  // namespace

Task<QueryResult> ask_provider(const Lookup& l, const config::Config& cfg, Worker& worker) {
  QueryResult result;
  auto const& q = l.tool.reconcile.query;
  policy::TemplateValues values{l.key, l.receipt, l.body};
  auto const url = policy::expand_url_template(q.url, values);
  if (!url || names_a_redacted_value(*url)) co_return result;
  auto qt = parse_absolute_target(*url);
  if (!qt) co_return result;
  StringRequest qr{http::string_to_verb(q.method), qt->origin_form, 11};
  qr.set(http::field::host, qt->authority());
  qr.set(http::field::accept_encoding, "identity");
  // Asking the provider needs the credentials the agent sent it, which
  // go only to the tool's own host, over HTTPS.
  if (l.agent && policy::may_forward_credentials(l.tool, l.agent_host, qt->scheme, qt->host)) {
    for (auto const& f : *l.agent) {
      if (f.name() == http::field::authorization || beast::iequals(f.name_string(), "x-api-key"))
        qr.set(f.name_string(), f.value());
    }
  }
  ExchangeOptions lookup;
  lookup.answer_limit = cfg.limits.guarded_answer;
  lookup.answer_budget = l.answer_budget;
  lookup.stream_rest = false;
  lookup.resend_if_stale = true;  // a lookup changes nothing
  qr.prepare_payload();
  UpstreamRequest out{qr.method(), {}, qr.body()};
  render_head(qr.base(), out.head);
  auto answer = co_await exchange(*qt, out, cfg, worker, lookup);
  if (answer.outcome != policy::TransportOutcome::answered) co_return result;
  int const status = answer.response.result_int();
  auto const& body = answer.response.body();
  if (status / 100 == 2 && policy::query_found(q, body)) {
    result.outcome = policy::QueryOutcome::found;
    boost::system::error_code ec;
    auto v = json::parse(body, ec);
    auto const* at = ec ? nullptr : (q.found.empty() ? &v : policy::find_pointer(v, q.found));
    result.found_json = at ? json::serialize(*at) : body;
  } else if (status == 404 || status / 100 == 2) {
    result.outcome = policy::QueryOutcome::not_found;
  }
  co_return result;
}

Task<QueryResult> ask_provider(Call& c) {
  std::string_view const key = c.intent ? std::string_view(c.intent->key) : std::string_view();
  std::string_view const receipt = c.intent ? std::string_view(c.intent->receipt) : std::string_view();
  Lookup l{c.tool, key, receipt, c.fp.body ? &*c.fp.body : nullptr, &c.req, c.target.host,
           c.answer_budget ? &*c.answer_budget : nullptr};
  co_return co_await ask_provider(l, c.cfg, c.worker);
}

ledger::Outcome found_outcome(const policy::Tool& tool, std::int64_t intent_id, const std::string& found_json) {
  ledger::Outcome o;
  o.intent_id = intent_id;
  o.attempt = 0;
  o.state = ledger::IntentState::completed;
  o.answer_class = "ok";
  o.status = 200;
  o.receipt = policy::receipt_of(tool, found_json).value_or(std::string());
  o.response = ledger::StoredResponse{200, {{"Content-Type", "application/json"}}, found_json, false};
  return o;
}

}  // namespace idemgate::proxy
