// Buffered upstream exchanges (see exchange.hpp).
#include "proxy/exchange.hpp"

#include "proxy/connect.hpp"
#include "proxy/worker.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using policy::TransportOutcome;

asio::awaitable<UpstreamAnswer> exchange(const Target& target, StringRequest& req, const config::Config& cfg,
                                         Worker& worker, std::uint64_t response_limit) {
  constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
  struct Timed {
    ledger::LatencyHistogram& histogram;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Timed() { histogram.observe(std::chrono::steady_clock::now() - start); }
  } timed{worker.stats().upstream_latency};
  UpstreamAnswer answer;
  std::string const pool_key = target.pool_key();
  auto up = worker.pool().take(pool_key);
  if (!up) {
    auto outcome = co_await connect_upstream(target, cfg, worker);
    if (!outcome.connection) {
      answer.outcome = TransportOutcome::connect_failed;
      answer.problem = std::move(outcome.problem);
      co_return answer;
    }
    up = std::move(outcome.connection);
  }
  answer.reused_connection = up->requests > 0;
  req.prepare_payload();

  up->stream.expires_after(cfg.timeouts.idle);
  auto [wec, written] = co_await http::async_write(up->stream, req, use_tuple);
  if (wec) {
    // Nothing written on a fresh connection: the request never left.
    answer.outcome = written == 0 && !answer.reused_connection ? TransportOutcome::connect_failed
                                                               : TransportOutcome::sent_no_answer;
    answer.problem = Problem{502, "upstream_write_failed", "Sending upstream failed",
                             "sending the request to " + target.host + " failed: " + wec.message()};
    co_return answer;
  }

  for (;;) {
    http::response_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(cfg.limits.header_bytes));
    parser.body_limit(response_limit);
    if (req.method() == http::verb::head) parser.skip(true);
    up->stream.expires_after(cfg.timeouts.upstream_response);
    auto [ec, n] = co_await http::async_read(up->stream, up->buffer, parser, use_tuple);
    // A TLS upstream closing without close_notify ends an EOF-delimited body.
    if (ec == asio::ssl::error::stream_truncated && parser.is_header_done() && parser.need_eof()) parser.put_eof(ec);
    if (ec) {
      answer.outcome = TransportOutcome::sent_no_answer;
      std::string const why = ec == beast::error::timeout ? "no complete answer within timeouts.upstream_response"
                                                          : "the connection broke before a complete answer: " +
                                                                ec.message();
      answer.problem = Problem{504, "upstream_timeout", "No complete answer from upstream", why};
      co_return answer;
    }
    auto const code = parser.get().result_int();
    if (code >= 100 && code < 200 && code != 101) continue;
    bool const reusable = parser.keep_alive() && !parser.need_eof() && up->buffer.size() == 0;
    answer.response = parser.release();
    answer.outcome = TransportOutcome::answered;
    ++up->requests;
    if (reusable && !worker.draining()) worker.pool().give_back(pool_key, std::move(up));
    co_return answer;
  }
}

}  // namespace idemgate::proxy
