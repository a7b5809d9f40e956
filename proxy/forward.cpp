// The pass-through path: connect (or reuse), send the transformed request
// header, stream the body, read the answer header within its deadline and
// stream it back, then pool the upstream connection if it can be reused.
#include "proxy/forward.hpp"

#include "proxy/answer_head.hpp"
#include "proxy/connect.hpp"
#include "proxy/log.hpp"
#include "proxy/relay.hpp"
#include "proxy/respond.hpp"
#include "proxy/whole_write.hpp"
#include "proxy/worker.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/write.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/write.hpp>

#include <array>
#include <tuple>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr auto use_tuple = asio::as_tuple(use_task);

struct Exchange {
  std::string_view method;   // static for known verbs, else in unknown_method
  std::string unknown_method;
  const Target* target = nullptr;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  unsigned status = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  bool reused = false;
  std::string reason_code;

  // The path without its query: a query can carry secrets (tokens, keys).
  void log() const {
    if (!request_log_enabled()) return;
    auto const us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
    std::string_view const origin = target->origin_form;
    LogLine line("request");
    line.add("method", method)
        .add("host", target->host)
        .add("port", unsigned{target->port})
        .add("path", origin.substr(0, origin.find('?')))
        .add("status", status)
        .add("bytes_in", bytes_in)
        .add("bytes_out", bytes_out)
        .add("duration_ms", std::int64_t{us.count() / 1000})
        .add("duration_us", std::int64_t{us.count()})
        .add("upstream_reused", reused);
    if (!reason_code.empty()) line.add("reason_code", reason_code);
    line.emit();
  }
};

bool is_timeout(const beast::error_code& ec) { return ec == beast::error::timeout; }

Problem body_too_large(const config::Config& cfg) {
  return Problem{413, "body_too_large", "Request body too large",
                 "the request body is larger than limits.request_body (" + std::to_string(cfg.limits.request_body) +
                     " bytes)"};
}

}  // namespace

Task<ForwardResult> forward_request(ProxyStream& client, beast::flat_buffer& client_buffer,
                                               http::request_parser<http::buffer_body>& parser, const Target& target,
                                               const config::Config& cfg, Worker& worker) {
  auto& req = parser.get();
  Exchange x;
  if (req.method() == http::verb::unknown) {
    x.unknown_method = std::string(req.method_string());
    x.method = x.unknown_method;
  } else {
    x.method = http::to_string(req.method());
  }
  x.target = &target;
  unsigned const client_version = req.version();
  bool const client_wants_keep_alive = req.keep_alive();
  auto const& timeouts = cfg.timeouts;

  // GCC 12 destroys temporaries inside a co_await expression twice: every
  // problem is built into a named variable before it is awaited.
  auto answer_problem = [&](const Problem& p) -> Task<ForwardResult> {
    x.status = p.status;
    x.reason_code = p.reason_code;
    worker.stats().problems.fetch_add(1, std::memory_order_relaxed);
    co_await send_problem(client, p, client_version, false, timeouts.client_header);
    x.log();
    co_return ForwardResult{false};
  };

  if (cfg.limits.request_body != 0 && parser.content_length() && *parser.content_length() > cfg.limits.request_body) {
    Problem const p = body_too_large(cfg);
    co_return co_await answer_problem(p);
  }
  bool const has_body = !parser.is_done();
  bool const expect_continue = beast::iequals(req[http::field::expect], "100-continue");

  // The header the upstream sees.
  bool const chunked = parser.chunked();
  bool const head_request = req.method() == http::verb::head;
  req.target(target.origin_form);
  strip_hop_by_hop(req, true);
  if (expect_continue) req.erase(http::field::expect);
  // Most clients already send the one Host the target names: kept as it is.
  if (std::string authority = target.authority();
      req.count(http::field::host) != 1 || req[http::field::host] != authority)
    req.set(http::field::host, authority);
  add_via(req, client_version);
  req.version(11);
  if (chunked) req.chunked(true);

  std::string const pool_key = target.pool_key();
  std::unique_ptr<UpstreamConnection> up;
  AnswerHead head;
  std::optional<AnswerParser> answer;
  AnswerFraming framing;
  std::size_t header_size = 0;  // the answer header's bytes, at the front of up->buffer
  bool sent_continue = false;

  // A reused connection can die between our check and our request; a
  // body-less request is then re-sent once on a fresh connection.
  for (int attempt = 0;; ++attempt) {
    up = worker.pool().take(pool_key);
    if (!up) {
      auto outcome = co_await connect_upstream(target, cfg, worker);
      if (!outcome.connection) co_return co_await answer_problem(*outcome.problem);
      up = std::move(outcome.connection);
    }
    x.reused = up->requests > 0;

    if (expect_continue && has_body && !sent_continue) {
      // We now know we will forward: let the client send its body.
      client.expires_after(timeouts.client_header);
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      auto [ec, n] = co_await asio::async_write(client, asio::buffer(kContinue, sizeof kContinue - 1), use_tuple);
      if (ec) co_return ForwardResult{false};
      sent_continue = true;
    }

    RelayResult sent;
    if (has_body) {
      http::serializer<true, http::buffer_body> sr{req};
      sent = co_await relay_body(client, client_buffer, parser, up->stream, sr, timeouts.idle,
                                 cfg.limits.request_body);
    } else {
      render_head(req, up->head);
      WholeWrite w(up->stream, up->head, asio::const_buffer{});
      if (!w.done) std::tie(w.ec, std::ignore) = co_await w.write_rest(up->stream, timeouts.idle);
      sent.ec = w.ec;
      if (sent.ec) sent.failure = RelayFailure::write;
    }
    x.bytes_in = sent.body_bytes;
    if (sent.failure == RelayFailure::too_large) {
      Problem const p = body_too_large(cfg);
      co_return co_await answer_problem(p);
    }
    if (sent.failure == RelayFailure::read) {
      // The client stopped sending its body: nobody is left to answer.
      x.status = 0;
      x.reason_code = is_timeout(sent.ec) ? "client_body_timeout" : "client_body_aborted";
      x.log();
      co_return ForwardResult{false};
    }
    if (sent.failure == RelayFailure::write) {
      if (x.reused && !has_body && attempt == 0) continue;
      Problem const p = upstream_connect_failed("sending the request upstream failed: " + sent.ec.message());
      co_return co_await answer_problem(p);
    }

    // The answer header, skipping interim 1xx answers. Read by hand (the
    // loop of Beast's read_some, without its composed operation) so that
    // the header bytes stay in the buffer: the head's views point into
    // them until the answer is written or handed to Beast's parser. A
    // plain header that came whole is read without Beast's parser
    // (read_plain_answer_head); any other, Beast parses as far as its lines
    // are complete, and a header that came in pieces is parsed again whole
    // by a fresh parser once more bytes arrive (reading may move the
    // buffer, and with it the views).
    auto const fresh_parser = [&] {
      answer.emplace(head);
      answer->header_limit(static_cast<std::uint32_t>(cfg.limits.header_bytes));
      answer->body_limit(boost::none);
      if (head_request) answer->skip(true);
    };
    bool retry = false;
    for (;;) {
      fresh_parser();
      up->stream.expires_after(timeouts.upstream_response);
      beast::error_code ec;
      header_size = 0;
      while (header_size == 0) {
        if (up->buffer.size() != 0) {
          auto const bytes = up->buffer.data();
          std::string_view const text(static_cast<const char*>(bytes.data()), bytes.size());
          if (!head_request && read_plain_answer_head(text, cfg.limits.header_bytes, head, framing)) {
            header_size = framing.header_size;
            break;
          }
          if (answer->got_some()) fresh_parser();
          answer->input(text);
          header_size = answer->put(bytes, ec);
          if (!ec && header_size != 0) framing = answer->framing(header_size);
          if (ec != http::error::need_more) break;
          ec = {};
          header_size = 0;
          up->stream.tcp().ack_now();  // a header in pieces: the rest may wait for our ACK
        }
        auto const room = beast::read_size(up->buffer, 65536);
        if (room == 0) {
          ec = http::error::buffer_overflow;
          break;
        }
        auto const [rec, n] = co_await up->stream.async_read_some(up->buffer.prepare(room), use_tuple);
        up->buffer.commit(n);
        ec = rec;
        if (ec == asio::error::eof) {
          // As Beast's read: a partial header is a partial message, none
          // at all the end of the stream.
          if (answer->got_some()) {
            ec = {};
            answer->put_eof(ec);
          } else {
            ec = http::error::end_of_stream;
          }
          break;
        }
        if (ec) break;
      }
      if (!ec && header_size == 0) ec = http::error::partial_message;  // never expected: an EOF before a header
      if (ec) {
        if (is_timeout(ec)) {
          Problem const p = upstream_timed_out("no answer header from " + target.host + ":" +
                                               std::to_string(target.port) + " within timeouts.upstream_response");
          co_return co_await answer_problem(p);
        }
        bool const nothing_received = up->buffer.size() == 0;
        if (x.reused && !has_body && attempt == 0 && nothing_received &&
            (ec == http::error::end_of_stream || ec == asio::error::connection_reset ||
             ec == asio::error::eof)) {
          retry = true;
          break;
        }
        if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset) {
          Problem const p{502, "upstream_closed", "Upstream closed the connection",
                          "the upstream closed the connection before a complete answer header: " + ec.message()};
          co_return co_await answer_problem(p);
        }
        Problem const p{502, "upstream_bad_response", "Bad answer from upstream",
                        "the upstream's answer header could not be read: " + ec.message()};
        co_return co_await answer_problem(p);
      }
      auto const code = head.status;
      if (code >= 100 && code < 200 && code != 101) {  // interim: drop it
        up->buffer.consume(header_size);
        continue;
      }
      break;
    }
    if (retry) continue;
    break;
  }

  // The answer the client sees.
  x.status = head.status;
  bool const upstream_chunked = framing.chunked;
  auto const content_length = framing.content_length;
  bool const eof_delimited = !framing.done && !upstream_chunked && !content_length;
  bool client_keep_alive = client_wants_keep_alive && !worker.draining() && parser.is_done();
  bool rechunk = false;
  if (upstream_chunked || eof_delimited) {
    if (client_version == 11)
      rechunk = true;
    else
      client_keep_alive = false;
  }
  prepare_answer_head(head, client_version, rechunk, client_keep_alive);
  bool const upstream_keep_alive = framing.keep_alive && !framing.need_eof;

  // Most answers are small and arrived whole with their header: they go out
  // in one write. Others (chunked, long, delimited by EOF) are relayed.
  std::size_t const after_header = up->buffer.size() - header_size;
  bool const arrived_whole = framing.done || (!upstream_chunked && content_length && *content_length <= after_header);
  if (arrived_whole) {
    std::size_t const body_bytes = framing.done ? 0 : static_cast<std::size_t>(*content_length);
    render_head(head, up->head);
    asio::const_buffer const body(static_cast<const char*>(up->buffer.data().data()) + header_size, body_bytes);
    WholeWrite w(client, up->head, body);
    if (!w.done) std::tie(w.ec, std::ignore) = co_await w.write_rest(client, timeouts.idle);
    if (w.ec) {
      x.reason_code = "client_gone";
      x.log();
      co_return ForwardResult{false};
    }
    up->buffer.consume(header_size + body_bytes);
    x.bytes_out = body_bytes;
  } else {
    up->stream.tcp().ack_now();  // the rest may wait for our ACK (TimedSocket::ack_now)
    // Beast's parser reads the same header again to stream the body; the
    // message it serializes carries the rewritten head.
    http::response_parser<http::buffer_body> rp;
    rp.header_limit(static_cast<std::uint32_t>(cfg.limits.header_bytes));
    rp.body_limit(boost::none);
    if (head_request) rp.skip(true);
    beast::error_code ec;
    std::size_t const reread = rp.put(asio::buffer(up->buffer.data().data(), header_size), ec);
    if (ec || reread != header_size) {  // the same bytes, the same grammar: never expected
      Problem const p{502, "upstream_bad_response", "Bad answer from upstream",
                      "the upstream's answer header could not be read again: " + ec.message()};
      co_return co_await answer_problem(p);
    }
    auto& res = rp.get();
    head.copy_to(res.base());
    res.version(client_version);
    up->buffer.consume(header_size);
    http::serializer<false, http::buffer_body> sr{res};
    auto got = co_await relay_body(up->stream, up->buffer, rp, client, sr, timeouts.idle, 0);
    x.bytes_out = got.body_bytes;
    if (got.failure != RelayFailure::none) {
      x.reason_code = got.failure == RelayFailure::read ? "upstream_body_aborted" : "client_gone";
      x.log();
      co_return ForwardResult{false};
    }
  }
  ++up->requests;
  if (upstream_keep_alive && up->buffer.size() == 0 && !worker.draining()) {
    worker.give_back(pool_key, std::move(up));
  }
  x.log();
  co_return ForwardResult{client_keep_alive};
}

}  // namespace idemgate::proxy
