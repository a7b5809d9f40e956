// The reconcile lookup (see query_reconcile.hpp).
#include "proxy/query_reconcile.hpp"

#include "policy/credentials.hpp"
#include "policy/json_pointer.hpp"
#include "policy/reconcile.hpp"
#include "proxy/exchange.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/json.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;

asio::awaitable<QueryResult> ask_provider(Call& c) {
  QueryResult result;
  auto const& q = c.tool.reconcile.query;
  std::string const key = c.intent ? c.intent->key : std::string();
  std::string const receipt = c.intent ? c.intent->receipt : std::string();
  policy::TemplateValues values{key, receipt, c.fp.body ? &*c.fp.body : nullptr};
  auto const url = policy::expand_url_template(q.url, values);
  auto qt = url ? parse_absolute_target(*url) : std::nullopt;
  if (!qt) co_return result;
  StringRequest qr{http::string_to_verb(q.method), qt->origin_form, 11};
  qr.set(http::field::host, qt->authority());
  qr.set(http::field::accept_encoding, "identity");
  // Asking the provider needs the credentials the agent sent it, which
  // go only to the tool's own host, over HTTPS.
  if (policy::may_forward_credentials(c.tool, c.target.host, qt->scheme, qt->host)) {
    for (auto const& f : c.req) {
      if (f.name() == http::field::authorization || beast::iequals(f.name_string(), "x-api-key"))
        qr.set(f.name_string(), f.value());
    }
  }
  ExchangeOptions lookup;
  lookup.answer_limit = c.cfg.limits.guarded_answer;
  lookup.stream_rest = false;
  lookup.resend_if_stale = true;  // a lookup changes nothing
  auto answer = co_await exchange(*qt, qr, c.cfg, c.worker, lookup);
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

}  // namespace idemgate::proxy
