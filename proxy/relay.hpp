// Streams one message body from a parser to a serializer through a fixed
// buffer, in constant memory (Beast's relay() shape, asynchronous).
// A template: include it only from the .cpp files that relay.
#pragma once

#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>

#include <array>
#include <chrono>
#include <cstdint>

namespace idemgate::proxy {

enum class RelayFailure { none, read, write, too_large };

struct RelayResult {
  RelayFailure failure = RelayFailure::none;
  boost::beast::error_code ec;
  std::uint64_t body_bytes = 0;
  bool header_written = false;
};

// Reads the body of p from in (in_buffer first) and writes the message
// through sr to out. The header is flushed at once when no body bytes are
// buffered yet, so a slow body never delays it. body_limit 0: unlimited.
template <bool isRequest, class InStream, class OutStream>
Task<RelayResult> relay_body(InStream& in, boost::beast::flat_buffer& in_buffer,
                                               boost::beast::http::parser<isRequest, boost::beast::http::buffer_body>& p,
                                               OutStream& out,
                                               boost::beast::http::serializer<isRequest, boost::beast::http::buffer_body>& sr,
                                               std::chrono::milliseconds idle, std::uint64_t body_limit) {
  namespace asio = boost::asio;
  namespace http = boost::beast::http;
  constexpr auto use_tuple = asio::as_tuple(use_task);
  RelayResult result;
  std::array<char, 16 * 1024> buf;
  auto& body = p.get().body();

  if (!p.is_done() && in_buffer.size() == 0) {
    sr.split(true);
    out.expires_after(idle);
    auto [ec, n] = co_await http::async_write_header(out, sr, use_tuple);
    if (ec) {
      result.failure = RelayFailure::write;
      result.ec = ec;
      co_return result;
    }
    result.header_written = true;
  }
  do {
    if (!p.is_done()) {
      body.data = buf.data();
      body.size = buf.size();
      if (in_buffer.size() == 0) in.expires_after(idle);
      auto [ec, n] = co_await http::async_read_some(in, in_buffer, p, use_tuple);
      if (ec == http::error::need_buffer) ec = {};
      // A TLS peer closing without close_notify ends a body delimited by
      // the close as well as a plain EOF does.
      if (ec == asio::ssl::error::stream_truncated && p.is_header_done() && p.need_eof()) p.put_eof(ec);
      if (ec) {
        result.failure = RelayFailure::read;
        result.ec = ec;
        co_return result;
      }
      std::size_t const got = buf.size() - body.size;
      result.body_bytes += got;
      if (body_limit != 0 && result.body_bytes > body_limit) {
        result.failure = RelayFailure::too_large;
        co_return result;
      }
      if (got == 0 && !p.is_done()) continue;  // framing only (a chunk header): nothing to send yet
      // An empty buffer would be serialized as the last chunk: send none.
      body.data = got ? buf.data() : nullptr;
      body.size = got;
      body.more = !p.is_done();
    } else {
      body.data = nullptr;
      body.size = 0;
      body.more = false;
    }
    out.expires_after(idle);
    auto [ec, n] = co_await http::async_write(out, sr, use_tuple);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      result.failure = RelayFailure::write;
      result.ec = ec;
      co_return result;
    }
    result.header_written = true;
  } while (!p.is_done() || !sr.is_done());
  co_return result;
}

}  // namespace idemgate::proxy
