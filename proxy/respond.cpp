// Answers the proxy makes itself (problem+json, JSON-RPC) on the client stream.
#include "proxy/respond.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

Task<bool> send_own_answer(ProxyStream& client, unsigned status, std::string_view content_type,
                                      std::string body, std::optional<unsigned> retry_after_s, unsigned version,
                                      bool keep_alive, std::chrono::milliseconds timeout,
                                      const http::fields* extra_headers) {
  http::response<http::string_body> res{static_cast<http::status>(status), version == 10 ? 10u : 11u};
  if (extra_headers) {
    for (auto const& f : *extra_headers) res.insert(f.name_string(), f.value());
  }
  res.set(http::field::content_type, content_type);
  res.set(http::field::cache_control, "no-store");
  if (retry_after_s) res.set(http::field::retry_after, std::to_string(*retry_after_s));
  res.body() = std::move(body);
  res.keep_alive(keep_alive);
  res.prepare_payload();
  client.expires_after(timeout);
  auto [ec, n] = co_await http::async_write(client, res, asio::as_tuple(use_task));
  co_return !ec;
}

Task<bool> send_problem(ProxyStream& client, const Problem& p, unsigned version, bool keep_alive,
                                   std::chrono::milliseconds timeout, const http::fields* extra_headers) {
  // Named first: GCC 12 destroys temporaries inside a co_await expression twice.
  std::string body = problem_json(p);
  co_return co_await send_own_answer(client, p.status, "application/problem+json", std::move(body), p.retry_after_s,
                                     version, keep_alive, timeout, extra_headers);
}

}  // namespace idemgate::proxy
