// The one executor every coroutine, socket and timer of idemgate runs on: an
// io_context's, named as such.
//
// Asio's defaults (awaitable<T>, tcp::socket, steady_timer, use_awaitable)
// carry any_io_executor, which erases the executor's type: each of its
// copies, moves and destructions, and each `prefer` of work tracking, is an
// indirect call through a table of functions. An operation's handler copies
// or moves its executor a dozen times between the co_await that starts it
// and the resumption, so on the guarded path that came to about 3,600
// instructions a write (bench/instructions). Every idemgate thread runs an
// io_context, so nothing is lost by naming its executor type: its copies are
// a pointer and a few bits, and the compiler sees through them.
//
// Spelled once, here, so that an awaitable of the ledger and one of the proxy
// can await each other: a coroutine can only await coroutines of its own
// executor type.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace idemgate {

using Executor = boost::asio::io_context::executor_type;

// A coroutine on an idemgate thread.
template <class T = void>
using Task = boost::asio::awaitable<T, Executor>;

// The completion token that makes an operation awaitable in a Task.
inline constexpr boost::asio::use_awaitable_t<Executor> use_task{};

using TcpSocket = boost::asio::ip::tcp::socket::rebind_executor<Executor>::other;
using TcpAcceptor = boost::asio::ip::tcp::acceptor::rebind_executor<Executor>::other;
using TcpResolver = boost::asio::ip::tcp::resolver::rebind_executor<Executor>::other;
using SteadyTimer = boost::asio::steady_timer::rebind_executor<Executor>::other;

}  // namespace idemgate
