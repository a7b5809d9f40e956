// The admin listener's routes: /healthz, /readyz, /metrics, the JSON API
// under /api/ (SPEC section 7) and the operator page. Every route but
// /healthz needs the bearer token (the page: the session cookie its login
// form sets); the page's POSTs also need its CSRF token and a same-origin
// Origin. JSON in and out; errors are problem+json with a reason_code.
#pragma once

#include "proxy/admin_auth.hpp"
#include "proxy/metrics.hpp"
#include "ledger/executor.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace idemgate::ledger {
class Ledger;
}

namespace idemgate::proxy {

struct AdminContext {
  ledger::Ledger& ledger;
  AdminAuth auth;
  MetricsSources metrics;
};

using AdminRequest = boost::beast::http::request<boost::beast::http::string_body>;
using AdminResponse = boost::beast::http::response<boost::beast::http::string_body>;

Task<AdminResponse> handle_admin_request(AdminContext& ctx, const AdminRequest& req);

}  // namespace idemgate::proxy
