// problem+json answers on the client stream.
#include "proxy/respond.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

asio::awaitable<bool> send_problem(ProxyStream& client, const Problem& p, unsigned version, bool keep_alive,
                                   std::chrono::milliseconds timeout, const http::fields* extra_headers) {
  http::response<http::string_body> res{static_cast<http::status>(p.status), version == 10 ? 10u : 11u};
  if (extra_headers) {
    for (auto const& f : *extra_headers) res.insert(f.name_string(), f.value());
  }
  res.set(http::field::content_type, "application/problem+json");
  res.set(http::field::cache_control, "no-store");
  if (p.retry_after_s) res.set(http::field::retry_after, std::to_string(*p.retry_after_s));
  res.body() = problem_json(p);
  res.keep_alive(keep_alive);
  res.prepare_payload();
  client.expires_after(timeout);
  auto [ec, n] = co_await http::async_write(client, res, asio::as_tuple(asio::use_awaitable));
  co_return !ec;
}

}  // namespace idemgate::proxy
