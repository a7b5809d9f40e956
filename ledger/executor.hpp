// The one executor idemgate's coroutines, sockets and timers run on: an
// io_context's, named as such.
//
// Asio's defaults (awaitable<T>, tcp::socket, steady_timer, use_awaitable)
// carry any_io_executor, which erases the executor's type: each of its
// copies, moves and destructions, and each `prefer` of work tracking, is an
// indirect call through a table of functions. An operation's handler copies
// or moves its executor a dozen times between the co_await that starts it
// and the resumption; on the guarded path that came to about 3,600
// instructions a write (bench/instructions), and a coroutine frame that
// holds one is larger. The network threads, the admin server and the
// background sweepers all run io_contexts, so their coroutines lose nothing
// by naming its executor type. Threads that are not an io_context's (the
// ledger's workers, the log writer, the password-hashing pool) keep their own
// executors; what the ledger's workers complete is posted to the caller's
// io_context.
//
// One difference from any_io_executor, measured and left: Asio 1.81 runs an
// operation's completion at once when the I/O object's executor and the
// awaiting coroutine's are both any_io_executor over one io_context, but
// with the concrete type its general handler_work template counts work and
// runs the handler through the executor (a thread check and a memory fence).
// That happens about twice a guarded write (callgrind: scheduler::can_dispatch
// 2.0 calls a write), against the dozen type-erased copies saved.
//
// Spelled once, here, so that an awaitable of the ledger and one of the proxy
// can await each other: a coroutine can only await coroutines of its own
// executor type. Ledger::record_outcome and record_after_answer take this
// executor too: a strand or a thread pool's would need their own overloads.
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

