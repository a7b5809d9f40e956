// The escalation webhook (see notifier.hpp).
#include "proxy/notifier.hpp"

#include "proxy/admin_auth.hpp"
#include "proxy/log.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;

namespace {
constexpr auto use_tuple = asio::as_tuple(use_task);
constexpr std::size_t seen_limit = 4096;
}  // namespace

Notifier::Notifier(asio::io_context& ioc, config::Notify target, std::shared_ptr<asio::ssl::context> tls,
                   NotifyStats& stats, NotifyOptions options)
    : ioc_(ioc), target_(std::move(target)), tls_(std::move(tls)), stats_(stats), options_(options), wake_(ioc) {}

std::string Notifier::body_for(std::int64_t id, const ledger::EscalationRequest& r) {
  boost::system::error_code ec;
  auto package = json::parse(r.package_json, ec);
  json::object o{{"event", "escalation"},
                 {"escalation_id", id},
                 {"run", r.run},
                 {"reason_code", r.reason_code},
                 {"package", ec ? json::value(r.package_json) : package}};
  o["intent_id"] = r.intent_id ? json::value(*r.intent_id) : json::value(nullptr);
  return json::serialize(o);
}

void Notifier::enqueue(std::int64_t id, const ledger::EscalationRequest& request) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || !seen_.insert(id).second) return;
    if (seen_.size() > seen_limit) seen_.erase(seen_.begin());
    if (queue_.size() >= options_.queue_limit) {
      stats_.dropped.fetch_add(1, std::memory_order_relaxed);
      log_event("notify_dropped", {{"escalation_id", id}, {"detail", "the webhook queue is full"}});
      return;
    }
    queue_.push_back({id, body_for(id, request)});
    stats_.queued.store(queue_.size(), std::memory_order_relaxed);
  }
  asio::post(ioc_, [this] { wake_.cancel(); });
}

void Notifier::start() {
  asio::co_spawn(ioc_, deliver_loop(), [](std::exception_ptr e) { log_exception("notifier", e); });
}

void Notifier::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  asio::post(ioc_, [this] { wake_.cancel(); });
}

Task<void> Notifier::deliver_loop() {
  for (;;) {
    std::optional<Item> item;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) co_return;
      if (!queue_.empty()) item = queue_.front();
    }
    if (!item) {
      wake_.expires_at(SteadyTimer::time_point::max());
      co_await wake_.async_wait(use_tuple);
      continue;
    }
    auto backoff = options_.first_backoff;
    bool delivered = false;
    for (int attempt = 1; attempt <= options_.max_attempts && !delivered; ++attempt) {
      std::string why;
      delivered = co_await post(*item, attempt, why);
      if (delivered) break;
      stats_.attempts_failed.fetch_add(1, std::memory_order_relaxed);
      log_event("notify_retry", {{"escalation_id", item->id}, {"attempt", attempt}, {"error", why},
                                 {"retry_in_ms", attempt < options_.max_attempts ? backoff.count() : 0}});
      if (attempt == options_.max_attempts) break;
      SteadyTimer pause(ioc_, backoff);
      co_await pause.async_wait(use_tuple);
      {
        std::lock_guard lock(mutex_);
        if (stopping_) co_return;
      }
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    if (delivered) {
      stats_.delivered.fetch_add(1, std::memory_order_relaxed);
      log_event("notified", {{"escalation_id", item->id}});
    } else {
      stats_.dropped.fetch_add(1, std::memory_order_relaxed);
      log_event("notify_failed", {{"escalation_id", item->id}, {"attempts", options_.max_attempts},
                                  {"detail", "gave up; the package stays in the ledger's escalation queue"}});
    }
    std::lock_guard lock(mutex_);
    queue_.pop_front();
    stats_.queued.store(queue_.size(), std::memory_order_relaxed);
  }
}

Task<bool> Notifier::post(const Item& item, int attempt, std::string& why) {
  auto url = boost::urls::parse_absolute_uri(target_.url);
  if (!url) {
    why = "admin.notify.url does not parse";
    co_return false;
  }
  bool const tls = url->scheme() == "https";
  std::string const host = url->host_address();
  std::string const port = url->has_port() ? std::string(url->port()) : (tls ? "443" : "80");
  std::string target = url->encoded_path().empty() ? "/" : std::string(url->encoded_path());
  if (url->has_query()) target += "?" + std::string(url->encoded_query());

  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, url->has_port() ? host + ":" + port : host);
  req.set(http::field::user_agent, "idemgate-notify");
  req.set(http::field::content_type, "application/json");
  req.set("Idemgate-Signature", "sha256=" + hmac_sha256_hex(target_.secret, item.body));
  req.set("Idemgate-Escalation", std::to_string(item.id));
  req.set("Idemgate-Delivery-Attempt", std::to_string(attempt));
  req.keep_alive(false);
  req.body() = item.body;
  req.prepare_payload();

  TcpResolver resolver(ioc_);
  auto [rec, endpoints] = co_await resolver.async_resolve(host, port, use_tuple);
  if (rec) {
    why = "cannot resolve " + host + ": " + rec.message();
    co_return false;
  }
  beast::tcp_stream stream(ioc_);
  stream.expires_after(options_.timeout);
  auto [cec, ep] = co_await stream.async_connect(endpoints, use_tuple);
  if (cec) {
    why = "cannot connect to " + host + ":" + port + ": " + cec.message();
    co_return false;
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 * 1024);
  beast::flat_buffer buffer;
  boost::system::error_code ec;
  if (tls) {
    if (!tls_) {
      why = "no TLS context for an https webhook";
      co_return false;
    }
    beast::ssl_stream<beast::tcp_stream> secure(std::move(stream), *tls_);
    SSL_set_tlsext_host_name(secure.native_handle(), host.c_str());
    secure.set_verify_callback(asio::ssl::host_name_verification(host));
    std::tie(ec) = co_await secure.async_handshake(asio::ssl::stream_base::client, use_tuple);
    if (!ec) std::tie(ec, std::ignore) = co_await http::async_write(secure, req, use_tuple);
    if (!ec) std::tie(ec, std::ignore) = co_await http::async_read(secure, buffer, parser, use_tuple);
  } else {
    std::tie(ec, std::ignore) = co_await http::async_write(stream, req, use_tuple);
    if (!ec) std::tie(ec, std::ignore) = co_await http::async_read(stream, buffer, parser, use_tuple);
  }
  if (ec) {
    why = "POST " + target_.url + " failed: " + ec.message();
    co_return false;
  }
  auto const status = parser.get().result_int();
  if (status < 200 || status >= 300) {
    why = "the webhook answered " + std::to_string(status);
    co_return false;
  }
  co_return true;
}

}  // namespace idemgate::proxy
