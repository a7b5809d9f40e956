// PgDirectAdmit (see pg_direct.hpp): libpq's non-blocking calls on the
// caller's reactor, and the connector thread.
#include "ledger/pg_direct.hpp"

#include "ledger/pg_admit.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>

#include <libpq-fe.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <condition_variable>
#include <mutex>
#include <utility>

namespace idemgate::ledger {

namespace asio = boost::asio;
using boost::system::error_code;

struct PgDirectAdmit::Connection {
  explicit Connection(PGconn* c) : c(c) {}
  ~Connection() { PQfinish(c); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  PGconn* const c;
};

struct PgDirectAdmit::State {
  // The idle connection, now the caller's (null: none).
  std::shared_ptr<Connection> take() {
    std::lock_guard lock(mutex);
    return std::move(idle);
  }
  void give_back(std::shared_ptr<Connection> connection) {
    std::lock_guard lock(mutex);
    idle = std::move(connection);
  }
  // The connection is broken or its state unknown: it is closed, and the
  // connector makes another after its backoff.
  void lose(std::shared_ptr<Connection> connection) {
    connection.reset();
    {
      std::lock_guard lock(mutex);
      connected = false;
    }
    wake.notify_all();
  }

  std::mutex mutex;
  std::condition_variable wake;
  std::shared_ptr<Connection> idle;
  bool connected = false;  // a connection exists, idle or taken
  bool stopping = false;
};

namespace {

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// Row 0 of a result in libpq's text format.
class ResultRow final : public detail::RowView {
 public:
  explicit ResultRow(const PGresult* r) : r_(r) {}
  bool is_null(int c) const override { return PQgetisnull(r_, 0, c) != 0; }
  std::int64_t int64(int c) const override {
    std::int64_t value = 0;
    const char* s = PQgetvalue(r_, 0, c);
    std::from_chars(s, s + PQgetlength(r_, 0, c), value);
    return value;
  }
  std::optional<std::int64_t> optional_int64(int c) const override {
    if (is_null(c)) return std::nullopt;
    return int64(c);
  }
  std::string text(int c) const override { return std::string(PQgetvalue(r_, 0, c), PQgetlength(r_, 0, c)); }
  std::string blob(int c) const override {
    if (is_null(c)) return {};
    std::size_t n = 0;
    unsigned char* bytes = PQunescapeBytea(reinterpret_cast<const unsigned char*>(PQgetvalue(r_, 0, c)), &n);
    if (!bytes) return {};
    std::string out(reinterpret_cast<const char*>(bytes), n);
    PQfreemem(bytes);
    return out;
  }

 private:
  const PGresult* r_;
};

// Whether `fd` has input (or hung up) within `spin`, polled without
// sleeping. Between polls the coroutine goes to the back of its event
// loop's queue, so the thread serves its other connections meanwhile (the
// loop looks for their events without blocking while this one is queued),
// and yields the CPU: a database on the same machine may need it to answer.
// Blocking the thread instead would also make every poll look alone: no
// other admission could come while it polled (Ledger::admit).
Task<bool> readable_within(int fd, std::chrono::microseconds spin) {
  if (spin.count() <= 0) co_return false;
  auto const until = std::chrono::steady_clock::now() + spin;
  auto executor = co_await asio::this_coro::executor;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) co_return true;
    if (std::chrono::steady_clock::now() >= until) co_return false;
    ::sched_yield();
    co_await asio::post(executor, use_task);
  }
}

// What a statement that failed on the server means for the admission (it
// rolled back: nothing is written).
enum class Refused { queue, busy, failed };
Refused refused(const PGresult* result) {
  const char* field = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  std::string_view const state = field ? field : "";
  // A deadlock or serialisation failure: the workers run it again, as a
  // transaction of theirs would be. A connection ended by the server: their
  // own connections find out and reconnect.
  if (state == "40001" || state == "40P01" || pg::is_connection_state(state)) return Refused::queue;
  if (pg::is_timeout_state(state)) return Refused::busy;
  return Refused::failed;
}

// The deadline's view of the socket. Its handler may run on another thread
// of the caller's io_context (a test's pool) or after the admission is
// over: the mutex orders it with each wait's start and with the socket's
// hand-back, so that it cancels a wait that started, or makes the next one
// fail at once, and leaves a handed-back socket alone.
class Watch {
 public:
  explicit Watch(asio::posix::stream_descriptor& socket) : socket_(&socket) {}
  void expire() {
    std::lock_guard lock(mutex_);
    expired_ = true;
    if (socket_) socket_->cancel();
  }
  // socket.async_wait(what), unless the deadline passed: then
  // operation_aborted.
  template <class Token>
  auto wait(asio::posix::stream_descriptor::wait_type what, Token&& token) {
    return asio::async_initiate<Token, void(error_code)>(
        [this, what](auto handler) {
          std::lock_guard lock(mutex_);
          if (expired_ || !socket_) {
            auto executor = asio::get_associated_executor(handler);
            asio::post(executor, [h = std::move(handler)]() mutable { std::move(h)(error_code(asio::error::operation_aborted)); });
            return;
          }
          socket_->async_wait(what, std::move(handler));
        },
        token);
  }
  void end() {
    std::lock_guard lock(mutex_);
    socket_ = nullptr;
  }

 private:
  std::mutex mutex_;
  asio::posix::stream_descriptor* socket_;
  bool expired_ = false;
};

}  // namespace

PgDirectAdmit::PgDirectAdmit(std::string url, Millis statement_timeout, std::chrono::microseconds spin)
    // Named, so that an operator (and a test) can tell it in pg_stat_activity.
    : url_(pg::with_default(pg::with_bounds(std::move(url)),
                            "application_name=" + std::string(PgDirectAdmit::application_name))),
      statement_timeout_(statement_timeout),
      spin_(spin),
      state_(std::make_shared<State>()),
      stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  connector_ = std::thread([this] { connect_loop(); });
}

PgDirectAdmit::~PgDirectAdmit() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_all();
  if (stop_fd_ >= 0) {
    std::uint64_t const one = 1;
    [[maybe_unused]] auto n = ::write(stop_fd_, &one, sizeof one);
  }
  connector_.join();
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

bool PgDirectAdmit::takes(const AdmitRequest& request) const { return pg::admits_alone(request); }

int PgDirectAdmit::backend_pid() {
  std::lock_guard lock(state_->mutex);
  return state_->idle ? PQbackendPID(state_->idle->c) : 0;
}

Task<std::optional<Result<AdmitFirst>>> PgDirectAdmit::send(const AdmitRequest& request, bool spin) {
  using Out = std::optional<Result<AdmitFirst>>;
  std::shared_ptr<State> state = state_;
  auto connection = state->take();
  if (!connection) co_return Out();
  PGconn* const c = connection->c;
  int const fd = PQsocket(c);
  // The server ended the session while it was idle (a restart): nothing
  // sent, and the connector makes another.
  if (pg::ended_by_server(fd)) {
    state->lose(std::move(connection));
    co_return Out();
  }
  auto executor = co_await asio::this_coro::executor;
  // libpq's socket, lent to the caller's reactor for this admission (and
  // handed back, never closed, before the connection is: see Lent).
  asio::posix::stream_descriptor socket(executor);
  error_code ec;
  socket.assign(fd, ec);
  if (ec) {
    state->give_back(std::move(connection));
    co_return Out();
  }
  auto watch = std::make_shared<Watch>(socket);
  // Every way out hands the socket back; one that did not settle (the
  // coroutine destroyed mid-flight, at shutdown) loses the connection, so
  // that the connector makes another.
  struct Lent {
    State& state;
    asio::posix::stream_descriptor& s;
    Watch& w;
    std::shared_ptr<Connection>& connection;
    void settle(bool keep) {
      w.end();
      s.release();
      if (!connection) return;
      if (keep) {
        state.give_back(std::move(connection));
      } else {
        state.lose(std::move(connection));
      }
    }
    ~Lent() { settle(false); }
  } lent{*state, socket, *watch, connection};

  auto params = pg::admit_alone_params(request);
  const char* values[pg::admit_alone_param_count];
  for (int i = 0; i < pg::admit_alone_param_count; ++i) values[i] = params[i].c_str();
  // Failing here, the message left whole or not at all short of its Sync,
  // without which the server commits nothing.
  if (!PQsendQueryPrepared(c, "admit_alone", pg::admit_alone_param_count, values, nullptr, nullptr, 0)) {
    lent.settle(false);
    co_return Out();
  }
  // From here on the statement may commit. A silent server is bounded by
  // TCP keepalives; a slow one by its statement_timeout (an error reply),
  // and this deadline only in case neither comes.
  SteadyTimer deadline(executor);
  deadline.expires_after(statement_timeout_ + std::chrono::seconds(2));
  deadline.async_wait([watch](error_code e) {
    if (!e) watch->expire();
  });
  auto lost = [&] {
    lent.settle(false);
    return Out(Result<AdmitFirst>(error_code(errc::unavailable)));
  };

  int flushed = 0;
  while ((flushed = PQflush(c)) == 1) {
    co_await watch->wait(asio::posix::stream_descriptor::wait_write, asio::redirect_error(use_task, ec));
    if (ec) co_return lost();
  }
  if (flushed < 0) {
    // The rest of the message, its Sync with it, never left.
    lent.settle(false);
    co_return Out();
  }
  // The statement's result, then nothing more, is the normal end. Its
  // CommandComplete comes before the commit (at the Sync): an error after
  // the row is the commit's, or the session's end after it, and either
  // way the row's fate is unknown.
  ResultPtr result;
  bool error_after = false;
  // Asked to, the first wait for the answer polls for up to spin_ before it
  // sleeps in the event loop: a CPU that went idle for the length of a
  // durable commit wakes late, on a virtual machine by a few hundred
  // microseconds (measured: the guarded p50 at one connection fell by
  // 0.3-0.4 ms). The thread serves its other connections between polls.
  bool spun = !spin;
  for (;;) {
    bool done = false;
    while (!PQisBusy(c)) {
      PGresult* next = PQgetResult(c);
      if (!next) {
        done = true;
        break;
      }
      if (!result) {
        result.reset(next);
      } else {
        error_after = error_after || PQresultStatus(next) == PGRES_FATAL_ERROR;
        PQclear(next);
      }
    }
    if (done) break;
    bool const arrived = !std::exchange(spun, true) && co_await readable_within(fd, spin_);
    if (!arrived) {
      co_await watch->wait(asio::posix::stream_descriptor::wait_read, asio::redirect_error(use_task, ec));
      if (ec) co_return lost();
    }
    if (!PQconsumeInput(c)) {
      // The session ended. After the server's error for the statement (a
      // termination while it ran) nothing was written; otherwise unknown.
      if (!result || PQresultStatus(result.get()) != PGRES_FATAL_ERROR) co_return lost();
      break;
    }
  }
  deadline.cancel();
  bool const alive = PQstatus(c) == CONNECTION_OK;
  if (!result) co_return lost();
  auto const status = PQresultStatus(result.get());
  if (status == PGRES_TUPLES_OK && error_after) co_return lost();
  if (status == PGRES_TUPLES_OK && PQntuples(result.get()) == 1) {
    auto first = pg::read_admit_first(ResultRow(result.get()), PQnfields(result.get()), request.reserve);
    lent.settle(alive);
    co_return Out(Result<AdmitFirst>(std::move(first)));
  }
  lent.settle(alive);
  if (status == PGRES_FATAL_ERROR) {
    // It rolled back: nothing is written.
    auto const why = refused(result.get());
    if (why == Refused::queue) co_return Out();
    co_return Out(Result<AdmitFirst>(error_code(why == Refused::busy ? errc::busy : errc::storage_failure)));
  }
  co_return Out(Result<AdmitFirst>(error_code(errc::storage_failure)));
}

void PgDirectAdmit::connect_loop() {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  Millis backoff{0};
  for (;;) {
    s.wake.wait(lock, [&] { return s.stopping || !s.connected; });
    if (s.stopping) return;
    if (backoff.count() > 0 && s.wake.wait_for(lock, backoff, [&] { return s.stopping; })) return;
    lock.unlock();
    auto connection = open_connection();
    lock.lock();
    if (connection) {
      s.idle = std::move(connection);
      s.connected = true;
      backoff = Millis(0);
    } else {
      backoff = std::clamp(backoff * 2, Millis(50), Millis(2000));
    }
  }
}

namespace {

using Steady = std::chrono::steady_clock;

// Waits until the connection's socket is ready for `events`; false when the
// stop event came first, or the time ran out.
bool ready(PGconn* c, short events, int stop_fd, Steady::time_point give_up) {
  for (;;) {
    auto const left = std::chrono::duration_cast<Millis>(give_up - Steady::now());
    if (left.count() <= 0) return false;
    pollfd fds[2] = {{PQsocket(c), events, 0}, {stop_fd, POLLIN, 0}};
    int const n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) return false;
    if (fds[1].revents) return false;
    if (n > 0) return true;
  }
}

// The query just sent (non-blocking), to its end: whether each of its
// statements succeeded.
bool finished(PGconn* c, int stop_fd, Steady::time_point give_up) {
  int flushed = 0;
  while ((flushed = PQflush(c)) == 1)
    if (!ready(c, POLLOUT, stop_fd, give_up)) return false;
  if (flushed < 0) return false;
  bool ok = true;
  for (;;) {
    while (!PQisBusy(c)) {
      ResultPtr r(PQgetResult(c));
      if (!r) return ok;
      ok = ok && PQresultStatus(r.get()) == PGRES_COMMAND_OK;
    }
    if (!ready(c, POLLIN, stop_fd, give_up) || !PQconsumeInput(c)) return false;
  }
}

// The URL's connect_timeout in seconds (with_bounds sets one), which
// PQconnectPoll leaves to its caller: this bounds the connect and the
// session's setup.
std::chrono::seconds connect_timeout(PGconn* c) {
  long seconds = 5;
  if (PQconninfoOption* options = PQconninfo(c)) {
    for (auto* o = options; o->keyword; ++o)
      if (std::string_view(o->keyword) == "connect_timeout" && o->val && *o->val) seconds = std::atol(o->val);
    PQconninfoFree(options);
  }
  return std::chrono::seconds(std::max(1L, seconds));
}

}  // namespace

std::shared_ptr<PgDirectAdmit::Connection> PgDirectAdmit::open_connection() {
  PGconn* raw = PQconnectStart(url_.c_str());
  if (!raw) return nullptr;
  auto connection = std::make_shared<Connection>(raw);
  if (PQstatus(raw) == CONNECTION_BAD) return nullptr;
  // Every step waits on the stop event too: the destructor never waits for
  // a server that accepted and went silent.
  auto const give_up = Steady::now() + connect_timeout(raw);
  for (auto state = PGRES_POLLING_WRITING; state != PGRES_POLLING_OK; state = PQconnectPoll(raw)) {
    if (state == PGRES_POLLING_FAILED) return nullptr;
    if (!ready(raw, state == PGRES_POLLING_READING ? POLLIN : POLLOUT, stop_fd_, give_up)) return nullptr;
  }
  // A server the ledger does not support (check_server) gets nothing: the
  // admissions go through the ledger's workers, which name the refusal.
  if (pg::check_server(PQserverVersion(raw))) return nullptr;
  if (PQsetnonblocking(raw, 1) != 0) return nullptr;
  if (!PQsendQuery(raw, pg::session_settings(statement_timeout_).c_str()) || !finished(raw, stop_fd_, give_up))
    return nullptr;
  if (!PQsendPrepare(raw, "admit_alone", pg::admit_alone_sql().c_str(), 0, nullptr) ||
      !finished(raw, stop_fd_, give_up))
    return nullptr;
  return connection;
}

}  // namespace idemgate::ledger
