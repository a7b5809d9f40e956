// Buffered upstream exchanges (see exchange.hpp).
#include "proxy/exchange.hpp"

#include "proxy/answer_buffer.hpp"
#include "proxy/connect.hpp"
#include "proxy/relay.hpp"
#include "proxy/whole_write.hpp"
#include "proxy/worker.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/assert.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>

namespace idemgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using policy::TransportOutcome;

struct AnswerTail {
  std::unique_ptr<UpstreamConnection> up;
  std::optional<http::response_parser<http::buffer_body>> parser;
  std::string pool_key;
};

namespace {

constexpr auto use_tuple = asio::as_tuple(use_task);

// What became of one send on one connection.
enum class Sent {
  answered,           // the connection is in the tail, or spent
  answered_reusable,  // the whole answer read; the connection can carry another
  stale,              // failed before any byte of the answer came back
  failed,             // failed after the answer began, or timed out
};

void remember_keep_alive(UpstreamConnection& up, const http::fields& answer) {
  auto const timeout = keep_alive_timeout(answer[http::field::keep_alive]);
  up.keep_alive_timeout = timeout ? std::chrono::steady_clock::duration(*timeout)
                                  : std::chrono::steady_clock::duration::zero();
}

// Reads an answer's header into p, as http::async_read_header does (the same
// errors: end_of_stream when the connection ends before any byte,
// partial_message after some), but piece by piece: a piece that leaves the
// header incomplete is acknowledged at once (TimedSocket::ack_now), since
// its rest may be waiting for that ACK.
Task<beast::error_code> read_answer_header(UpstreamConnection& up, http::response_parser<http::buffer_body>& p) {
  beast::error_code ec;
  for (;;) {
    if (up.buffer.size() != 0) {
      auto const used = p.put(up.buffer.data(), ec);
      up.buffer.consume(used);
      if (ec != http::error::need_more) co_return ec;  // the header, or a bad one
      ec = {};
      up.stream.tcp().ack_now();
    }
    auto const room = beast::read_size(up.buffer, 65536);
    if (room == 0) co_return http::error::buffer_overflow;
    auto const [rec, n] = co_await up.stream.async_read_some(up.buffer.prepare(room), use_tuple);
    up.buffer.commit(n);
    if (rec == asio::error::eof) {
      if (!p.got_some()) co_return http::error::end_of_stream;
      p.put_eof(ec);
      co_return ec;
    }
    if (rec) co_return rec;
  }
}

// A rendered header and its body in memory in one write that does not
// suspend when the socket takes it all (most requests and answers). Gives
// the error and the bytes written, as async_write would.
Task<std::tuple<beast::error_code, std::size_t>> write_whole(ProxyStream& out, const std::string& head,
                                                                       asio::const_buffer body,
                                                                       std::chrono::milliseconds idle) {
  WholeWrite w(out, head, body);
  std::size_t written = w.written;
  if (!w.done) {
    auto [ec, n] = co_await w.write_rest(out, idle);
    w.ec = ec;
    written += n;
  }
  co_return std::tuple{w.ec, written};
}

// Reads the answer's body into `body`, at most limit + 1 bytes (one more
// than the limit tells "longer" from "exactly the limit" on chunked bodies),
// and no more than `budget` can grow to (cut_by_budget: it stopped there).
Task<beast::error_code> read_body_prefix(UpstreamConnection& up, http::response_parser<http::buffer_body>& p,
                                                    std::string& body, std::uint64_t limit,
                                                    BodyBudget::Reservation* budget, bool& cut_by_budget) {
  AnswerBuffer buffered(body, budget);
  auto const length = p.content_length();
  std::optional<std::uint64_t> const wanted = length ? std::optional<std::uint64_t>(*length) : std::nullopt;
  while (!p.is_done() && body.size() <= limit) {
    if (!buffered.make_room(limit + 1, wanted)) {
      cut_by_budget = true;
      break;
    }
    auto const old = body.size();
    auto const room = static_cast<std::size_t>(std::min(buffered.room(), AnswerBuffer::step));
    body.resize(old + room);
    auto& buffer = p.get().body();
    buffer.data = body.data() + old;
    buffer.size = room;
    auto [ec, n] = co_await http::async_read(up.stream, up.buffer, p, use_tuple);
    body.resize(old + (room - buffer.size));
    if (ec == http::error::need_buffer) ec = {};
    // A TLS upstream closing without close_notify ends an EOF-delimited body.
    if (ec == asio::ssl::error::stream_truncated && p.need_eof()) p.put_eof(ec);
    if (ec) co_return ec;
  }
  co_return beast::error_code{};
}

Task<Sent> send_once(const Target& target, const UpstreamRequest& req, const config::Config& cfg,
                                const ExchangeOptions& options, std::unique_ptr<UpstreamConnection>& up,
                                UpstreamAnswer& answer) {
  auto [wec, written] =
      co_await write_whole(up->stream, req.head, asio::buffer(req.body.data(), req.body.size()), cfg.timeouts.idle);
  if (wec) {
    // Nothing written on a fresh connection: the request never left.
    answer.outcome = written == 0 && !answer.reused_connection ? TransportOutcome::connect_failed
                                                               : TransportOutcome::sent_no_answer;
    answer.problem = Problem{502, "upstream_write_failed", "Sending upstream failed",
                             "sending the request to " + target.host + " failed: " + wec.message()};
    co_return Sent::stale;
  }

  auto tail = std::make_shared<AnswerTail>();
  up->stream.expires_after(cfg.timeouts.upstream_response);
  for (;;) {
    auto& p = tail->parser.emplace();
    p.header_limit(static_cast<std::uint32_t>(cfg.limits.header_bytes));
    p.body_limit(boost::none);  // the buffer is bounded by read_body_prefix; the rest streams
    if (req.method == http::verb::head) p.skip(true);
    beast::error_code ec = co_await read_answer_header(*up, p);
    bool const nothing_back = !p.got_some() && up->buffer.size() == 0;
    std::string body;
    if (!ec) {
      auto const code = p.get().result_int();
      if (code >= 100 && code < 200 && code != 101) continue;
      // A body not known to be here whole may wait for our ACK
      // (TimedSocket::ack_now).
      auto const length = p.content_length();
      if (!p.is_done() && !(length && up->buffer.size() >= *length)) up->stream.tcp().ack_now();
      ec = co_await read_body_prefix(*up, p, body, options.answer_limit, options.answer_budget,
                                     answer.cut_by_budget);
    }
    if (ec) {
      answer.outcome = TransportOutcome::sent_no_answer;
      std::string const why = ec == beast::error::timeout ? "no complete answer within timeouts.upstream_response"
                                                          : "the connection broke before a complete answer: " +
                                                                ec.message();
      answer.problem = Problem{504, "upstream_timeout", "No complete answer from upstream", why};
      co_return nothing_back && ec != beast::error::timeout ? Sent::stale : Sent::failed;
    }
    bool const complete = p.is_done();
    if (!complete && !options.stream_rest) {
      answer.outcome = TransportOutcome::sent_no_answer;
      std::string const why =
          answer.cut_by_budget
              ? "does not fit in what limits.guarded_budget (" + std::to_string(cfg.limits.guarded_budget) +
                    " bytes for all guarded calls at once) has left: " + std::to_string(body.size()) +
                    " bytes buffered"
              : "is larger than limits.guarded_answer (" + std::to_string(options.answer_limit) + " bytes)";
      answer.problem = Problem{502, "upstream_answer_too_large", "Upstream answer too large",
                               "the answer from " + target.host + " " + why};
      co_return Sent::failed;
    }
    remember_keep_alive(*up, p.get());
    // A whole answer's header is the parser's no more: moved, not copied. A
    // tail's parser goes on reading the body, so its header is left whole.
    if (complete) answer.response.base() = std::move(p.get().base());
    else answer.response.base() = p.get().base();
    answer.response.body() = std::move(body);
    answer.outcome = TransportOutcome::answered;
    ++up->requests;
    if (!complete) {
      tail->up = std::move(up);
      tail->pool_key = target.pool_key();
      answer.tail = std::move(tail);
      co_return Sent::answered;
    }
    co_return p.keep_alive() && !p.need_eof() && up->buffer.size() == 0 ? Sent::answered_reusable : Sent::answered;
  }
}

}  // namespace

Task<UpstreamAnswer> exchange(const Target& target, const UpstreamRequest& req,
                                         const config::Config& cfg, Worker& worker, const ExchangeOptions& options) {
  struct Timed {
    ledger::LatencyHistogram& histogram;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Timed() { histogram.observe(std::chrono::steady_clock::now() - start); }
  } timed{worker.stats().upstream_latency};
  std::string const pool_key = target.pool_key();
  auto up = worker.pool().take(pool_key, options.reuse);
  for (int send = 0;; ++send) {
    UpstreamAnswer answer;
    answer.resent = send > 0;
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
    auto const sent = co_await send_once(target, req, cfg, options, up, answer);
    if (answer.cut_by_budget) worker.stats().answers_cut_by_budget.fetch_add(1, std::memory_order_relaxed);
    if (sent == Sent::stale && answer.reused_connection && options.resend_if_stale && send == 0) {
      up.reset();
      continue;
    }
    if (sent == Sent::answered_reusable && !worker.draining())
      worker.give_back(pool_key, std::move(up));
    co_return answer;
  }
}

Task<bool> write_answer(ProxyStream& client, const AnswerHead& head, std::string_view body,
                                   bool keep_alive, AnswerTail* tail, const config::Config& cfg, Worker& worker) {
  if (!tail) {
    // Never chunked: the answer lost Transfer-Encoding with the hop-by-hop
    // fields and carries its body's length.
    std::string rendered;
    render_head(head, rendered);
    auto [ec, n] = co_await write_whole(client, rendered, asio::buffer(body.data(), body.size()), cfg.timeouts.idle);
    co_return !ec && keep_alive;
  }
  client.expires_after(cfg.timeouts.idle);
  // The parser's own message is the one serialized: relay_body refills its
  // buffer_body from the upstream and writes it through sr.
  auto& p = *tail->parser;
  auto& out = p.get();
  head.copy_to(out);
  out.result(head.status);
  out.version(head.version);
  out.reason({});  // the status's own text, as render_head writes it
  out.erase(http::field::content_length);
  out.erase(http::field::transfer_encoding);
  // The upstream's length when it gave one; else chunked, or for an
  // HTTP/1.0 client the end of the connection.
  if (auto const length = p.content_length()) {
    out.content_length(*length);
  } else if (head.version >= 11) {
    out.chunked(true);
  } else {
    out.keep_alive(false);
  }
  out.body().data = const_cast<char*>(body.data());  // only read: buffer_body's pointer is not const
  out.body().size = body.size();
  out.body().more = true;
  http::serializer<false, http::buffer_body> sr{out};
  auto [ec, n] = co_await http::async_write(client, sr, use_tuple);
  if (ec == http::error::need_buffer) ec = {};
  if (ec) co_return false;
  // relay_body fills the parser's buffer_body with its own buffer from here.
  auto& up = *tail->up;
  auto const relayed = co_await relay_body(up.stream, up.buffer, p, client, sr, cfg.timeouts.idle, 0);
  if (relayed.failure != RelayFailure::none) co_return false;
  if (p.keep_alive() && !p.need_eof() && up.buffer.size() == 0 && !worker.draining())
    worker.give_back(tail->pool_key, std::move(tail->up));
  co_return out.keep_alive();
}

}  // namespace idemgate::proxy
