// One whole message (a rendered header and body bytes already in memory)
// in one gathered write, on the pass-through and the guarded paths alike.
#pragma once

#include "proxy/stream.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>

#include <array>
#include <chrono>
#include <string>

namespace idemgate::proxy {

// What the socket takes at once is written on the spot (the coroutine does
// not suspend, no Asio operation); a rest is written by an operation under
// the idle deadline. Not a coroutine of its own (a frame a write): the
// caller awaits write_rest only when !done. `head` and the body's bytes must
// outlive the write.
struct WholeWrite {
  using Buffers = std::array<boost::asio::const_buffer, 2>;

  WholeWrite(ProxyStream& out, const std::string& head, boost::asio::const_buffer body)
      : rest(Buffers{boost::asio::buffer(head), body}) {
    std::size_t const total = head.size() + body.size();
    written = out.write_some_now(rest, ec);
    // Nothing taken now (or a signal came first): the rest waits for room.
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again ||
        ec == boost::asio::error::interrupted)
      ec = {};
    done = ec || written == total;
    rest.consume(written);
  }

  auto write_rest(ProxyStream& out, std::chrono::milliseconds idle) {
    out.expires_after(idle);
    return boost::asio::async_write(out, rest, boost::asio::as_tuple(use_task));
  }

  boost::system::error_code ec;
  std::size_t written = 0;  // taken at once, before any write_rest
  bool done = false;
  boost::beast::buffers_suffix<Buffers> rest;
};

}  // namespace idemgate::proxy
