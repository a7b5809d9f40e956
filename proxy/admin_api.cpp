// Admin routes (see admin_api.hpp).
#include "proxy/admin_api.hpp"

#include "ledger/ledger.hpp"
#include "proxy/admin_page.hpp"
#include "proxy/ops.hpp"
#include "proxy/problem.hpp"
#include "ledger/executor.hpp"

#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include <chrono>
#include <ctime>
#include <map>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace json = boost::json;
namespace urls = boost::urls;

namespace {

struct Target {
  std::vector<std::string> segments;  // decoded
  std::map<std::string, std::string, std::less<>> params;
  std::string path;
};

std::optional<Target> parse_target(std::string_view text) {
  auto url = urls::parse_origin_form(text);
  if (!url) return std::nullopt;
  Target t;
  t.path = std::string(url->path());
  for (auto const& s : url->segments())
    if (!s.empty()) t.segments.push_back(s);
  for (auto const& p : url->params()) t.params.emplace(p.key, p.has_value ? p.value : "");
  return t;
}

std::string param(const Target& t, std::string_view name) {
  auto it = t.params.find(name);
  return it == t.params.end() ? std::string() : it->second;
}

AdminResponse base(const AdminRequest& req, http::status status, std::string_view type, std::string body) {
  AdminResponse res{status, req.version()};
  res.set(http::field::server, "idemgate-admin");
  res.set(http::field::content_type, type);
  res.set(http::field::cache_control, "no-store");
  res.set("X-Content-Type-Options", "nosniff");
  res.keep_alive(req.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

AdminResponse json_answer(const AdminRequest& req, json::value body, unsigned status = 200) {
  return base(req, static_cast<http::status>(status), "application/json", json::serialize(body) + "\n");
}

AdminResponse problem_answer(const AdminRequest& req, unsigned status, std::string reason, std::string title,
                             std::string detail) {
  Problem p;
  p.status = status;
  p.reason_code = reason;
  p.title = std::move(title);
  p.detail = detail;
  p.extra["error"] = json::object{{"type", "invalid_request_error"}, {"code", reason}, {"message", detail}};
  auto res = base(req, static_cast<http::status>(status), "application/problem+json", problem_json(p) + "\n");
  if (status == 401) res.set(http::field::www_authenticate, "Bearer realm=\"idemgate admin\"");
  return res;
}

AdminResponse html_answer(const AdminRequest& req, std::string html, unsigned status = 200) {
  auto res = base(req, static_cast<http::status>(status), "text/html; charset=utf-8", std::move(html));
  // Nothing but this page's own inline style and script; never framed.
  res.set("Content-Security-Policy",
          "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src 'self'; "
          "form-action 'self'; frame-ancestors 'none'; base-uri 'none'");
  res.set("X-Frame-Options", "DENY");
  // same-origin, not no-referrer: with no-referrer browsers send "Origin: null" on our own form POSTs.
  res.set("Referrer-Policy", "same-origin");
  return res;
}

AdminResponse redirect(const AdminRequest& req, std::string location) {
  auto res = base(req, http::status::see_other, "text/plain", "");
  res.set(http::field::location, location);
  return res;
}

AdminResponse from_op(const AdminRequest& req, const ops::OpResult& r, std::string_view wrap = {}) {
  if (!r.ok()) {
    std::string title = r.status == 404 ? "Not found" : r.status == 409 ? "Conflict" : r.status == 400 ? "Bad request"
                                                                                                      : "Ledger unavailable";
    auto res = problem_answer(req, r.status, r.reason_code, std::move(title), r.detail);
    if (r.status == 503) res.set(http::field::retry_after, "1");
    return res;
  }
  if (!wrap.empty()) return json_answer(req, json::object{{wrap, r.body}});
  return json_answer(req, r.body);
}

AdminResponse page_error(const AdminRequest& req, const ops::OpResult& r) {
  return html_answer(req, page::render_error(r.status, r.reason_code, r.detail), r.status);
}

// The page's own origin: a POST from anywhere else is refused. Browsers send
// Origin on every cross-origin POST and Sec-Fetch-Site where supported.
bool same_origin(const AdminRequest& req) {
  auto const origin = req[http::field::origin];
  if (!origin.empty() && origin != "http://" + std::string(req[http::field::host])) return false;
  auto const site = req["Sec-Fetch-Site"];
  return site.empty() || site == "same-origin" || site == "none";
}

// application/x-www-form-urlencoded: '+' is a space, %XX a byte.
std::string form_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::map<std::string, std::string, std::less<>> form_fields(const AdminRequest& req) {
  std::map<std::string, std::string, std::less<>> out;
  std::string_view body = req.body();
  while (!body.empty()) {
    auto const amp = body.find('&');
    auto const pair = body.substr(0, amp);
    body = amp == std::string_view::npos ? std::string_view{} : body.substr(amp + 1);
    auto const eq = pair.find('=');
    out.emplace(form_decode(pair.substr(0, eq)), eq == std::string_view::npos ? "" : form_decode(pair.substr(eq + 1)));
  }
  return out;
}

std::string field(const std::map<std::string, std::string, std::less<>>& f, std::string_view name) {
  auto it = f.find(name);
  return it == f.end() ? std::string() : it->second;
}

// A JSON body's string member, "" when absent; nullopt when the body is not a JSON object.
std::optional<json::object> json_body(const AdminRequest& req) {
  if (req.body().empty()) return json::object{};
  boost::system::error_code ec;
  auto v = json::parse(req.body(), ec);
  if (ec || !v.is_object()) return std::nullopt;
  return std::move(v.as_object());
}

std::string member(const json::object& o, std::string_view name) {
  auto const* v = o.if_contains(name);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

ledger::TimePoint hours_ago(int hours) {
  return std::chrono::time_point_cast<ledger::Millis>(ledger::Clock::now() - std::chrono::hours(hours));
}

int limit_of(const Target& t) {
  auto n = ops::parse_id(param(t, "limit"));
  return n ? static_cast<int>(std::min<std::int64_t>(*n, 1000)) : 100;
}

Task<AdminResponse> api(AdminContext& ctx, const AdminRequest& req, const Target& t) {
  auto const& s = t.segments;  // s[0] == "api"
  bool const get = req.method() == http::verb::get;
  bool const post = req.method() == http::verb::post;
  auto& ledger = ctx.ledger;
  if (post && !ctx.auth.has_token()) {
    // No token: only a same-origin JSON POST (a cross-site form cannot send one).
    if (!req[http::field::content_type].starts_with("application/json") || !same_origin(req))
      co_return problem_answer(req, 403, "cross_site_request", "Refused",
                               "POSTs to the admin API must be application/json from the same origin");
  }
  if (s.size() >= 2 && s[1] == "escalations") {
    if (s.size() == 2 && get) {
      auto state = param(t, "state");
      co_return from_op(req, co_await ops::list_escalations(ledger, state, limit_of(t)), "escalations");
    }
    auto id = s.size() >= 3 ? ops::parse_id(s[2]) : std::nullopt;
    if (s.size() >= 3 && !id) co_return problem_answer(req, 404, "not_found", "Not found", "escalation ids are numbers");
    if (s.size() == 3 && get) co_return from_op(req, co_await ops::show_escalation(ledger, *id));
    if (s.size() == 4 && s[3] == "resolve" && post) {
      auto body = json_body(req);
      if (!body) co_return problem_answer(req, 400, "invalid_argument", "Bad request", "the body must be a JSON object");
      auto action = member(*body, "action"), receipt = member(*body, "receipt"), note = member(*body, "note");
      co_return from_op(req, co_await ops::resolve_escalation(ledger, *id, action, receipt, note));
    }
  }
  if (s.size() >= 2 && s[1] == "intents") {
    if (s.size() == 2 && get) {
      if (auto key = param(t, "key"); !key.empty()) {
        auto r = co_await ops::find_intent_by_key(ledger, key);
        if (r.ok()) r.body = json::array{r.body};
        co_return from_op(req, r, "intents");
      }
      if (auto run = param(t, "run"); !run.empty())
        co_return from_op(req, co_await ops::list_intents(ledger, run, limit_of(t)), "intents");
      co_return problem_answer(req, 400, "invalid_argument", "Bad request", "give ?run=RUN or ?key=KEY");
    }
    if (s.size() == 3 && get) {
      auto id = ops::parse_id(s[2]);
      if (!id) co_return problem_answer(req, 404, "not_found", "Not found", "intent ids are numbers");
      co_return from_op(req, co_await ops::show_intent(ledger, *id));
    }
  }
  if (s.size() >= 3 && s[1] == "runs") {
    if (s.size() == 3 && get) {
      std::string show = "show", reason;
      co_return from_op(req, co_await ops::run_action(ledger, s[2], show, reason));
    }
    if (s.size() == 4 && post && (s[3] == "kill" || s[3] == "unfreeze")) {
      auto body = json_body(req);
      if (!body) co_return problem_answer(req, 400, "invalid_argument", "Bad request", "the body must be a JSON object");
      auto reason = member(*body, "reason");
      co_return from_op(req, co_await ops::run_action(ledger, s[2], s[3], reason));
    }
  }
  co_return problem_answer(req, get || post ? 404 : 405, get || post ? "not_found" : "method_not_allowed",
                           get || post ? "Not found" : "Method not allowed",
                           std::string(req.method_string()) + " " + t.path + " is not an admin API route");
}

Task<AdminResponse> operator_page(AdminContext& ctx, const AdminRequest& req, const Target& t) {
  auto const& s = t.segments;
  auto& ledger = ctx.ledger;
  auto const& csrf = ctx.auth.csrf_token();
  if (req.method() == http::verb::post) {
    auto const fields = form_fields(req);
    if (!same_origin(req) || !ctx.auth.csrf_ok(field(fields, "csrf")))
      co_return html_answer(req, page::render_error(403, "Refused", "this form did not come from the operator page"), 403);
    if (s.size() == 4 && s[0] == "actions" && s[1] == "escalations" && s[3] == "resolve") {
      auto id = ops::parse_id(s[2]);
      if (!id) co_return html_answer(req, page::render_error(404, "Not found", "no such escalation"), 404);
      auto action = field(fields, "action"), receipt = field(fields, "receipt"), note = field(fields, "note");
      auto r = co_await ops::resolve_escalation(ledger, *id, action, receipt, note);
      if (!r.ok()) co_return page_error(req, r);
      co_return redirect(req, "/escalations/" + std::to_string(*id));
    }
    if (s.size() == 4 && s[0] == "actions" && s[1] == "runs" && (s[3] == "kill" || s[3] == "unfreeze")) {
      auto reason = field(fields, "reason");
      auto r = co_await ops::run_action(ledger, s[2], s[3], reason);
      if (!r.ok()) co_return page_error(req, r);
      co_return redirect(req, "/runs/" + page::escape_url(s[2]));
    }
    co_return html_answer(req, page::render_error(404, "Not found", "no such action"), 404);
  }
  if (req.method() != http::verb::get && req.method() != http::verb::head)
    co_return html_answer(req, page::render_error(405, "Method not allowed", "use GET or the page's forms"), 405);
  if (s.empty()) {
    page::QueueFilter filter;
    if (t.params.count("state")) filter.state = param(t, "state");
    filter.reason = param(t, "reason");
    std::optional<ledger::EscalationState> only;
    if (!filter.state.empty()) {
      only = ledger::parse_escalation_state(filter.state);
      if (!only) co_return html_answer(req, page::render_error(400, "Bad request", "unknown state"), 400);
    }
    auto list = co_await ledger.list_escalations(only, 500);
    if (!list) co_return page_error(req, ops::OpResult{503, {}, "ledger_unavailable", list.error().message()});
    co_return html_answer(req, page::render_queue(*list, filter));
  }
  if (s.size() == 2 && s[0] == "escalations") {
    auto id = ops::parse_id(s[1]);
    if (!id) co_return html_answer(req, page::render_error(404, "Not found", "no such escalation"), 404);
    auto e = co_await ledger.find_escalation(*id);
    if (!e) {
      unsigned const status = e.error() == ledger::errc::not_found ? 404 : 503;
      co_return html_answer(req, page::render_error(status, "Escalation " + std::to_string(*id), e.error().message()), status);
    }
    co_return html_answer(req, page::render_escalation(*e, csrf));
  }
  if (s.size() == 1 && s[0] == "runs") {
    if (auto run = param(t, "run"); !run.empty())
      co_return redirect(req, "/runs/" + page::escape_url(run));
    co_return html_answer(req, page::render_run("", std::nullopt, {}, csrf));
  }
  if (s.size() == 2 && s[0] == "runs") {
    auto run = co_await ledger.find_run(s[1]);
    if (!run && run.error() != ledger::errc::not_found)
      co_return page_error(req, ops::OpResult{503, {}, "ledger_unavailable", run.error().message()});
    std::vector<ledger::Intent> intents;
    if (run) {
      auto listed = co_await ledger.list_intents_by_run(s[1], 200);
      if (listed) intents = std::move(*listed);
    }
    co_return html_answer(req, page::render_run(s[1], run ? std::optional(*run) : std::nullopt, intents, csrf));
  }
  if (s.size() == 1 && s[0] == "dashboard") {
    auto const since = hours_ago(24);
    auto signals = co_await ledger.read_signals(since);
    if (!signals) co_return page_error(req, ops::OpResult{503, {}, "ledger_unavailable", signals.error().message()});
    co_return html_answer(req, page::render_dashboard(*signals, page::utc_time(since)));
  }
  co_return html_answer(req, page::render_error(404, "Not found", "no such page"), 404);
}

}  // namespace

Task<AdminResponse> handle_admin_request(AdminContext& ctx, const AdminRequest& req) {
  auto target = parse_target(req.target());
  if (!target) co_return problem_answer(req, 400, "malformed_request", "Bad request", "the request target is not a path");
  auto const& t = *target;
  bool const get = req.method() == http::verb::get || req.method() == http::verb::head;
  if (t.path == "/healthz") co_return json_answer(req, json::object{{"status", "ok"}});

  auto& auth = ctx.auth;
  bool const api_route = t.path.starts_with("/api/") || t.path == "/metrics" || t.path == "/readyz";
  bool authorized = false;
  if (!auth.has_token()) {
    // Loopback only (checked at start); a foreign Host is a DNS-rebinding page.
    if (!loopback_host(req[http::field::host]))
      co_return problem_answer(req, 403, "host_not_allowed", "Refused",
                               "without admin.token_file the admin listener answers loopback Host names only");
    authorized = true;
  } else {
    authorized = auth.bearer_ok(req[http::field::authorization]) || (!api_route && auth.cookie_ok(req[http::field::cookie]));
  }

  if (t.path == "/login") {
    if (!auth.has_token()) co_return redirect(req, "/");
    if (req.method() == http::verb::post) {
      if (!same_origin(req)) co_return html_answer(req, page::render_login("Refused: not from this page.", {}), 403);
      if (!auth.token_ok(field(form_fields(req), "token")))
        co_return html_answer(req, page::render_login("That is not the admin token.", {}), 401);
      auto res = redirect(req, "/");
      res.set(http::field::set_cookie, auth.session_cookie());
      co_return res;
    }
    co_return html_answer(req, page::render_login("", {}));
  }
  if (!authorized) {
    if (api_route) {
      bool const sent = !req[http::field::authorization].empty();
      co_return problem_answer(req, 401, "unauthorized", "Unauthorized",
                               sent ? "the bearer token is not the one in admin.token_file"
                                    : "send Authorization: Bearer <the token in admin.token_file>");
    }
    co_return html_answer(req, page::render_login("", {}), 401);
  }

  if (t.path == "/readyz") {
    std::string none;  // a real query that reads no row (GCC 12: no temporaries in co_await)
    auto n = co_await ctx.ledger.count_intents(none, none, none, 0);
    if (!n) {
      auto res = problem_answer(req, 503, "ledger_unavailable", "Not ready", "the ledger is not reachable: " + n.error().message());
      res.set(http::field::retry_after, "1");
      co_return res;
    }
    co_return json_answer(req, json::object{{"status", "ready"}});
  }
  if (t.path == "/metrics") {
    if (!get) co_return problem_answer(req, 405, "method_not_allowed", "Method not allowed", "GET /metrics");
    auto signals = co_await ctx.ledger.read_signals(hours_ago(1));
    co_return base(req, http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
                   render_metrics(ctx.metrics, signals ? &*signals : nullptr));
  }
  if (t.path.starts_with("/api/")) co_return co_await api(ctx, req, t);
  co_return co_await operator_page(ctx, req, t);
}

}  // namespace idemgate::proxy
