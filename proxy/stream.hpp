// A connection the proxy speaks HTTP over: plain TCP, or TLS on top of it (an
// intercepted agent connection, or a verified upstream). One concrete type, so
// session, forward, guard and relay need no templates on the stream: the
// branch is taken per I/O operation. Deadlines stay on the TCP layer
// (TimedSocket), which bounds the TLS records read and written over it.
#pragma once

#include "proxy/timed_socket.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <utility>

namespace idemgate::proxy {

class ProxyStream {
public:
  using executor_type = TimedSocket::executor_type;
  using TlsLayer = boost::asio::ssl::stream<TimedSocket&>;

  explicit ProxyStream(Executor ex) : tcp_(std::move(ex)) {}
  explicit ProxyStream(TcpSocket socket) : tcp_(std::move(socket)) {}
  // The TLS layer refers to tcp_: the object stays where it was built.
  ProxyStream(const ProxyStream&) = delete;
  ProxyStream& operator=(const ProxyStream&) = delete;

  executor_type get_executor() noexcept { return tcp_.get_executor(); }
  TimedSocket& tcp() noexcept { return tcp_; }
  TcpSocket& socket() noexcept { return tcp_.socket(); }

  bool is_tls() const noexcept { return tls_ != nullptr; }
  TlsLayer* tls() noexcept { return tls_.get(); }
  // Puts a TLS layer over the TCP stream; every later read and write goes
  // through it. The handshake is the caller's.
  TlsLayer& start_tls(boost::asio::ssl::context& ctx) {
    tls_ = std::make_unique<TlsLayer>(tcp_, ctx);
    return *tls_;
  }

  void expires_after(std::chrono::steady_clock::duration d) { tcp_.expires_after(d); }
  void expires_at(std::chrono::steady_clock::time_point t) { tcp_.expires_at(t); }
  void expires_never() { tcp_.expires_never(); }
  void close() { tcp_.close(); }

  template <class MutableBufferSequence, class ReadToken>
  auto async_read_some(const MutableBufferSequence& buffers, ReadToken&& token) {
    return boost::asio::async_initiate<ReadToken, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const MutableBufferSequence& b) {
          if (tls_)
            tls_->async_read_some(b, std::move(handler));
          else
            tcp_.async_read_some(b, std::move(handler));
        },
        token, buffers);
  }

  template <class ConstBufferSequence, class WriteToken>
  auto async_write_some(const ConstBufferSequence& buffers, WriteToken&& token) {
    return boost::asio::async_initiate<WriteToken, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const ConstBufferSequence& b) {
          if (tls_)
            tls_->async_write_some(b, std::move(handler));
          else
            tcp_.async_write_some(b, std::move(handler));
        },
        token, buffers);
  }

  // TimedSocket::write_some_now for plain TCP. Under TLS nothing is written
  // (0, no error): a record is written by the TLS layer's own operation.
  template <class ConstBufferSequence>
  std::size_t write_some_now(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
    if (tls_) return 0;
    return tcp_.write_some_now(buffers, ec);
  }

private:
  TimedSocket tcp_;
  std::unique_ptr<TlsLayer> tls_;
};

}  // namespace idemgate::proxy
