// The ledger's queued calls (see ledger.hpp), shared by the queue's engine
// (ledger.cpp, which sees a call only through Ledger::Job) and the calls'
// entry points (ledger_calls.cpp, which makes them): the Job interface, and
// the job types, each holding its awaiting coroutine's completion handler.
// Included by those two files only.
#pragma once

#include "ledger/ledger.hpp"

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <type_traits>

namespace idemgate::ledger {

namespace asio = boost::asio;
using boost::system::error_code;

class Ledger::Job {
 public:
  explicit Job(Order order) : order(std::move(order)) {}
  virtual ~Job() = default;
  // Runs the call on the store and keeps its Result until finish().
  virtual void run(Store& store) = 0;
  // Posts the kept Result to the caller.
  virtual void finish() = 0;
  // Posts `why` instead (queue full, stopping, or the batch failed).
  virtual void fail(error_code why) = 0;
  // Non-null for a reservation: the reservations of a batch are one
  // multi-row statement, whose results come back through keep().
  virtual ReserveRequest* reservation() noexcept { return nullptr; }
  virtual void keep(Result<Reservation>&&) {}
  // Non-null for a run charge: the charges of a batch are one
  // Store::count_calls, whose results come back through keep_charge().
  virtual ChargeRequest* charge() noexcept { return nullptr; }
  virtual void keep_charge(Result<RunCharge>&&) {}
  // Non-null for an outcome: the outcomes of a batch are one
  // Store::record_outcomes, whose results come back through keep_outcome().
  virtual Outcome* outcome() noexcept { return nullptr; }
  virtual void keep_outcome(Result<Intent>&&) {}
  // After the reservations and the charges: the attempt to begin, if any
  // (one Store::begin_attempts for the batch), its result to keep_start().
  virtual std::optional<AttemptRequest> first_attempt() { return std::nullopt; }
  // Non-null for an admission: alone in its batch it may be done whole by
  // Store::admit_alone, whose result comes back through keep_admission().
  virtual const AdmitRequest* admission() const noexcept { return nullptr; }
  virtual void keep_admission(Result<Admission>&&) {}
  virtual void keep_start(Result<AttemptStart>&&) {}
  // More than one Store call: needs a transaction even when alone.
  virtual bool multi_step() const noexcept { return false; }
  // The writer lane of a call that locks rows: outcomes (1) are written
  // beside admissions (0), so an answer's outcome never holds up the next
  // request's admission (see take_batch).
  virtual int lane() const noexcept { return 0; }

  const Order order;
  // Set by the engine: before then no batch starts with this call (an
  // outcome after its answer gathering others), though a batch may take it.
  std::chrono::steady_clock::time_point not_before{};
};

namespace jobs {

// Posts a Result to a completion handler on the handler's own executor:
// the Result itself, or (kBoxed) the box it is in, for a handler that takes
// a Boxed<T> (Ledger::admit's).
template <class T, class Handler, bool kBoxed = false>
class Completion {
 public:
  Completion(Handler handler, LedgerStats& stats)
      : work_(asio::prefer(asio::get_associated_executor(handler),
                           asio::execution::outstanding_work.tracked)),
        handler_(std::move(handler)),
        stats_(stats) {}

  void operator()(Result<T>&& result) {
    // Boxed: a Result holds an Intent (dozens of members), moved once
    // here; post's wrappers then move a pointer, not the Result. Boxed before
    // the handler is taken: an allocation that fails leaves it in place.
    (*this)(std::make_unique<Result<T>>(std::move(result)));
  }
  void operator()(Boxed<T> boxed) {
    if (boxed->has_error()) stats_.errors.fetch_add(1, std::memory_order_relaxed);
    stats_.latency.observe(std::chrono::steady_clock::now() - start_);
    asio::post(work_, [handler = std::move(handler_), boxed = std::move(boxed)]() mutable {
      if constexpr (kBoxed) {
        std::move(handler)(std::move(boxed));
      } else {
        std::move(handler)(std::move(*boxed));
      }
    });
  }

 private:
  std::decay_t<decltype(asio::prefer(asio::get_associated_executor(std::declval<Handler&>()),
                                     asio::execution::outstanding_work.tracked))>
      work_;
  Handler handler_;
  LedgerStats& stats_;
  std::chrono::steady_clock::time_point const start_ = std::chrono::steady_clock::now();
};

template <class T, class Op, class Handler>
class CallJob final : public Ledger::Job {
 public:
  CallJob(Ledger::Order order, Op op, Handler handler, LedgerStats& stats)
      : Job(std::move(order)), op_(std::move(op)), complete_(std::move(handler), stats) {}
  void run(Store& store) override { result_.emplace(op_(store)); }
  void finish() override { complete_(std::move(*result_)); }
  void fail(error_code why) override { complete_(Result<T>(why)); }

 private:
  Op op_;
  std::optional<Result<T>> result_;
  Completion<T, Handler> complete_;
};

// One call whose request joins its batch's multi-row statement: keeps the
// request, then the Result that statement gave it.
template <class Request, class T, class Handler>
class OneCallJob : public Ledger::Job {
 public:
  OneCallJob(Ledger::Order order, Request request, Handler handler, LedgerStats& stats)
      : Job(std::move(order)), request_(std::move(request)), complete_(std::move(handler), stats) {}
  void finish() override { complete_(std::move(*result_)); }
  void fail(error_code why) override { complete_(Result<T>(why)); }

 protected:
  Request request_;
  std::optional<Result<T>> result_;
  Completion<T, Handler> complete_;
};

template <class Handler>
class ReserveJob final : public OneCallJob<ReserveRequest, Reservation, Handler> {
 public:
  ReserveJob(ReserveRequest request, Handler handler, LedgerStats& stats)
      : OneCallJob<ReserveRequest, Reservation, Handler>({Ledger::Order::reservations, {}, 0},
                                                         std::move(request), std::move(handler), stats) {}
  void run(Store& store) override { keep(std::move(store.reserve_intents({&this->request_, 1}).front())); }
  ReserveRequest* reservation() noexcept override { return &this->request_; }
  void keep(Result<Reservation>&& result) override { this->result_.emplace(std::move(result)); }
};

template <class Handler>
class ChargeJob final : public OneCallJob<ChargeRequest, RunCharge, Handler> {
 public:
  ChargeJob(ChargeRequest request, Handler handler, LedgerStats& stats)
      : OneCallJob<ChargeRequest, RunCharge, Handler>({Ledger::Order::runs, request.run, 0}, std::move(request),
                                                      std::move(handler), stats) {}
  void run(Store& store) override { keep_charge(std::move(store.count_calls({&this->request_, 1}).front())); }
  ChargeRequest* charge() noexcept override { return &this->request_; }
  void keep_charge(Result<RunCharge>&& result) override { this->result_.emplace(std::move(result)); }
};

// Records an outcome and answers the intent as it leaves it.
template <class Handler>
class OutcomeJob final : public OneCallJob<Outcome, Intent, Handler> {
 public:
  OutcomeJob(Outcome outcome, Handler handler, LedgerStats& stats)
      : OneCallJob<Outcome, Intent, Handler>({Ledger::Order::intents, {}, outcome.intent_id}, std::move(outcome),
                                             std::move(handler), stats) {}
  void run(Store& store) override { keep_outcome(store.record_outcome(this->request_)); }
  Outcome* outcome() noexcept override { return &this->request_; }
  int lane() const noexcept override { return 1; }
  void keep_outcome(Result<Intent>&& result) override { this->result_.emplace(std::move(result)); }
};

// Records the outcome its watcher holds (Ledger::OutcomeWatcher) and answers
// only whether it was recorded. The outcome is read where it is, and a batch
// puts back what it moves out. Valid until finish or fail: they hand the
// watcher (which owns the outcome) on, and it may be gone before this job is.
template <class Handler>
class WatchedOutcomeJob final : public Ledger::Job {
 public:
  WatchedOutcomeJob(Outcome& outcome, Handler handler, LedgerStats& stats)
      : Job({Ledger::Order::intents, {}, outcome.intent_id}), outcome_(outcome), complete_(std::move(handler), stats) {}
  void run(Store& store) override { keep_outcome(store.record_outcome(outcome_)); }
  Outcome* outcome() noexcept override { return &outcome_; }
  int lane() const noexcept override { return 1; }
  void keep_outcome(Result<Intent>&& result) override {
    if (result) {
      result_.emplace();
    } else {
      result_.emplace(result.error());
    }
  }
  void finish() override { complete_(std::move(*result_)); }
  void fail(error_code why) override { complete_(Result<void>(why)); }

 private:
  Outcome& outcome_;
  std::optional<Result<void>> result_;
  Completion<void, Handler> complete_;
};

template <class Handler>
class AdmitJob final : public Ledger::Job {
 public:
  AdmitJob(AdmitRequest request, Handler handler, LedgerStats& stats)
      : Job({Ledger::Order::reservations, {}, 0}),
        charge_{request.reserve.run, request.budget, CallKind::write},
        request_(std::move(request)),
        complete_(std::move(handler), stats) {}
  void run(Store&) override {}  // multi_step: run_batch drives it
  bool multi_step() const noexcept override { return true; }
  ReserveRequest* reservation() noexcept override { return &request_.reserve; }
  void keep(Result<Reservation>&& result) override {
    reservation_.emplace(std::move(result));
    start_.reset();  // a batch run again (deadlock) keeps only its last results
    begun_.reset();
    // Stored with its first attempt begun (the charge counted, see below).
    if (*reservation_ && (*reservation_)->started) start_.emplace(FirstStart{AttemptOutcome::started, 1});
  }
  ChargeRequest* charge() noexcept override { return &charge_; }
  void keep_charge(Result<RunCharge>&& result) override {
    charge_result_.emplace(std::move(result));
    request_.reserve.start.reset();
    // Charges run before reservations: a counted one lets a fresh
    // reservation be stored with its first attempt begun, in one statement.
    if (*charge_result_ && (*charge_result_)->outcome == ChargeOutcome::counted && request_.first_attempt &&
        request_.first_attempt->max_attempts > 0)
      request_.reserve.start = ReserveRequest::Start{request_.first_attempt->lease, request_.first_attempt->replica};
  }
  std::optional<AttemptRequest> first_attempt() override {
    // No attempt asked for (max_attempts 0): none tried, as in keep_charge
    // and a lone admission.
    if (!request_.first_attempt || request_.first_attempt->max_attempts <= 0 || !reservation_ || !*reservation_ ||
        !charge_result_ || !*charge_result_)
      return std::nullopt;
    if ((*reservation_)->started) return std::nullopt;  // begun with the reservation
    if ((*reservation_)->outcome != ReserveOutcome::reserved || (*charge_result_)->outcome != ChargeOutcome::counted)
      return std::nullopt;
    const Intent& intent = (*reservation_)->intent;
    return AttemptRequest{intent.id, intent.state, intent.attempts, request_.first_attempt->max_attempts,
                          request_.first_attempt->lease};
  }
  void keep_start(Result<AttemptStart>&& result) override {
    if (!result) return void(start_.emplace(result.error()));
    start_.emplace(FirstStart{result->outcome, result->attempt});
    begun_.emplace(std::move(result->intent));
  }
  const AdmitRequest* admission() const noexcept override { return &request_; }
  void keep_admission(Result<Admission>&& result) override { whole_.emplace(std::move(result)); }
  void finish() override {
    if (whole_) return complete_(std::move(*whole_));
    if (!reservation_ || !charge_result_) return complete_(Result<Admission>(error_code(errc::storage_failure)));
    if (!*reservation_) return complete_(Result<Admission>(reservation_->error()));
    if (!*charge_result_) return complete_(Result<Admission>(charge_result_->error()));
    if (start_ && !*start_) return complete_(Result<Admission>(start_->error()));
    // Made in its box, with the intent as begin_attempts left it, if it ran.
    if (start_ && begun_) (*reservation_)->intent = std::move(*begun_);
    auto boxed = std::make_unique<Result<Admission>>(Admission{});
    (*boxed)->charge = **charge_result_;
    (*boxed)->reservation = std::move(**reservation_);  // the one move of the intent here
    if (start_) (*boxed)->start = **start_;
    complete_(std::move(boxed));
  }
  void fail(error_code why) override { complete_(Result<Admission>(why)); }

 private:
  ChargeRequest charge_;
  AdmitRequest request_;
  std::optional<Result<Reservation>> reservation_;
  std::optional<Result<RunCharge>> charge_result_;
  std::optional<Result<FirstStart>> start_;
  std::optional<Intent> begun_;  // the intent begin_attempts gave, if it ran
  std::optional<Result<Admission>> whole_;  // done by Store::admit_alone
  Completion<Admission, Handler, true> complete_;  // answers a Boxed<Admission>
};

inline Ledger::Order intent_order(std::int64_t id) { return {Ledger::Order::intents, {}, id}; }
inline const Ledger::Order unlocked{Ledger::Order::unlocked, {}, 0};
inline const Ledger::Order alone{Ledger::Order::alone, {}, 0};


}  // namespace jobs

}  // namespace idemgate::ledger
