// The async facade over the Store workers (see ledger.hpp). A call becomes a
// Job holding the awaiting coroutine's completion handler; a worker takes a
// batch of Jobs, runs them in one Store::batch() transaction, and posts each
// Result back to its handler's executor once the batch committed, keeping
// that executor's work count up meanwhile so its io_context does not return.
#include "ledger/ledger.hpp"

#include "ledger/open_store.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <optional>

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
  virtual void keep(Result<Reservation>) {}
  // Non-null for a run charge: the charges of a batch are one
  // Store::count_calls, whose results come back through keep_charge().
  virtual ChargeRequest* charge() noexcept { return nullptr; }
  virtual void keep_charge(Result<RunCharge>) {}
  // Non-null for an outcome: the outcomes of a batch are one
  // Store::record_outcomes, whose results come back through keep_outcome().
  virtual Outcome* outcome() noexcept { return nullptr; }
  virtual void keep_outcome(Result<Intent>) {}
  // After the reservations and the charges: the attempt to begin, if any
  // (one Store::begin_attempts for the batch), its result to keep_start().
  virtual std::optional<AttemptRequest> first_attempt() { return std::nullopt; }
  // Non-null for an admission: alone in its batch it may be done whole by
  // Store::admit_alone, whose result comes back through keep_admission().
  virtual const AdmitRequest* admission() const noexcept { return nullptr; }
  virtual void keep_admission(Result<Admission>) {}
  virtual void keep_start(Result<AttemptStart>) {}
  // More than one Store call: needs a transaction even when alone.
  virtual bool multi_step() const noexcept { return false; }
  // The writer lane of a call that locks rows: outcomes (1) are written
  // beside admissions (0), so an answer's outcome never holds up the next
  // request's admission (see take_batch).
  virtual int lane() const noexcept { return 0; }

  const Order order;
};

namespace {

// Posts a Result to a completion handler on the handler's own executor.
template <class T, class Handler>
class Completion {
 public:
  Completion(Handler handler, LedgerStats& stats)
      : work_(asio::prefer(asio::get_associated_executor(handler),
                           asio::execution::outstanding_work.tracked)),
        handler_(std::move(handler)),
        stats_(stats) {}

  void operator()(Result<T> result) {
    if (result.has_error()) stats_.errors.fetch_add(1, std::memory_order_relaxed);
    stats_.latency.observe(std::chrono::steady_clock::now() - start_);
    asio::post(work_, [handler = std::move(handler_), result = std::move(result)]() mutable {
      std::move(handler)(std::move(result));
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
  void keep(Result<Reservation> result) override { this->result_.emplace(std::move(result)); }
};

template <class Handler>
class ChargeJob final : public OneCallJob<ChargeRequest, RunCharge, Handler> {
 public:
  ChargeJob(ChargeRequest request, Handler handler, LedgerStats& stats)
      : OneCallJob<ChargeRequest, RunCharge, Handler>({Ledger::Order::runs, request.run, 0}, std::move(request),
                                                      std::move(handler), stats) {}
  void run(Store& store) override { keep_charge(std::move(store.count_calls({&this->request_, 1}).front())); }
  ChargeRequest* charge() noexcept override { return &this->request_; }
  void keep_charge(Result<RunCharge> result) override { this->result_.emplace(std::move(result)); }
};

template <class Handler>
class OutcomeJob final : public OneCallJob<Outcome, Intent, Handler> {
 public:
  OutcomeJob(Outcome outcome, Handler handler, LedgerStats& stats)
      : OneCallJob<Outcome, Intent, Handler>({Ledger::Order::intents, {}, outcome.intent_id}, std::move(outcome),
                                             std::move(handler), stats) {}
  void run(Store& store) override { keep_outcome(store.record_outcome(this->request_)); }
  Outcome* outcome() noexcept override { return &this->request_; }
  int lane() const noexcept override { return 1; }
  void keep_outcome(Result<Intent> result) override { this->result_.emplace(std::move(result)); }
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
  void keep(Result<Reservation> result) override {
    reservation_.emplace(std::move(result));
    start_.reset();  // a batch run again (deadlock) keeps only its last results
    // Stored with its first attempt begun (the charge counted, see below).
    if (*reservation_ && (*reservation_)->started)
      start_.emplace(AttemptStart{AttemptOutcome::started, 1, (*reservation_)->intent});
  }
  ChargeRequest* charge() noexcept override { return &charge_; }
  void keep_charge(Result<RunCharge> result) override {
    charge_result_.emplace(std::move(result));
    request_.reserve.start.reset();
    // Charges run before reservations: a counted one lets a fresh
    // reservation be stored with its first attempt begun, in one statement.
    if (*charge_result_ && (*charge_result_)->outcome == ChargeOutcome::counted && request_.first_attempt &&
        request_.first_attempt->max_attempts > 0)
      request_.reserve.start = ReserveRequest::Start{request_.first_attempt->lease, request_.first_attempt->replica};
  }
  std::optional<AttemptRequest> first_attempt() override {
    if (!request_.first_attempt || !reservation_ || !*reservation_ || !charge_result_ || !*charge_result_)
      return std::nullopt;
    if ((*reservation_)->started) return std::nullopt;  // begun with the reservation
    if ((*reservation_)->outcome != ReserveOutcome::reserved || (*charge_result_)->outcome != ChargeOutcome::counted)
      return std::nullopt;
    const Intent& intent = (*reservation_)->intent;
    return AttemptRequest{intent.id, intent.state, intent.attempts, request_.first_attempt->max_attempts,
                          request_.first_attempt->lease};
  }
  void keep_start(Result<AttemptStart> result) override { start_.emplace(std::move(result)); }
  const AdmitRequest* admission() const noexcept override { return &request_; }
  void keep_admission(Result<Admission> result) override { whole_.emplace(std::move(result)); }
  void finish() override {
    if (whole_) return complete_(std::move(*whole_));
    if (!reservation_ || !charge_result_) return complete_(Result<Admission>(error_code(errc::storage_failure)));
    if (!*reservation_) return complete_(Result<Admission>(reservation_->error()));
    if (!*charge_result_) return complete_(Result<Admission>(charge_result_->error()));
    Admission admission{**charge_result_, std::move(**reservation_), std::nullopt};
    if (start_) {
      if (!*start_) return complete_(Result<Admission>(start_->error()));
      admission.start = std::move(**start_);
    }
    complete_(Result<Admission>(std::move(admission)));
  }
  void fail(error_code why) override { complete_(Result<Admission>(why)); }

 private:
  ChargeRequest charge_;
  AdmitRequest request_;
  std::optional<Result<Reservation>> reservation_;
  std::optional<Result<RunCharge>> charge_result_;
  std::optional<Result<AttemptStart>> start_;
  std::optional<Result<Admission>> whole_;  // done by Store::admit_alone
  Completion<Admission, Handler> complete_;
};

Ledger::Order intent_order(std::int64_t id) { return {Ledger::Order::intents, {}, id}; }
const Ledger::Order unlocked{Ledger::Order::unlocked, {}, 0};
const Ledger::Order alone{Ledger::Order::alone, {}, 0};

}  // namespace

Result<std::unique_ptr<Ledger>> Ledger::open(const config::Ledger& config,
                                             const config::Redact& redact,
                                             std::string replica_id) {
  auto stores = open_stores(config);
  if (!stores) return stores.error();
  auto& first = *stores->front();
  if (auto version = first.migrate(); !version) return version.error();
  // Only attempts whose lease has passed: a process still running (the old
  // one of a rolling restart, another replica) keeps its live attempts.
  if (auto recovered = first.recover_expired(); !recovered) return recovered.error();
  LedgerOptions options;
  options.replica_id = std::move(replica_id);
  options.queue_limit = static_cast<std::size_t>(std::max(1, config.queue_limit));
  options.response_cap = config.response_cap;
  options.redact = redact;
  return std::make_unique<Ledger>(std::move(*stores), std::move(options));
}

Ledger::Ledger(std::vector<std::unique_ptr<Store>> stores, LedgerOptions options)
    : options_(std::move(options)), stores_(std::move(stores)) {
  // Two writers at once and still a worker for the calls that lock nothing.
  lanes_ = stores_.size() >= 3 && stores_.front()->concurrent_writers();
  for (auto& store : stores_) workers_.emplace_back([this, s = store.get()] { work(*s); });
}

Ledger::~Ledger() {
  std::deque<std::unique_ptr<Job>> abandoned;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    abandoned.swap(queue_);
  }
  ready_.notify_all();
  for (auto& job : abandoned) job->fail(errc::shutting_down);
  for (auto& worker : workers_) worker.join();
}

std::size_t Ledger::queued() {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

bool Ledger::enqueue(std::unique_ptr<Job> job) {
  error_code why;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      why = errc::shutting_down;
    } else if (queue_.size() >= options_.queue_limit) {
      why = errc::busy;
    } else {
      queue_.push_back(std::move(job));
    }
  }
  if (!why) {
    // Idle workers are alike (any of them may take any call that can be
    // taken now): one is enough. A call that must wait for its lane's writer
    // is taken when that writer finishes (it wakes them all).
    ready_.notify_one();
    return true;
  }
  if (why == errc::busy) stats_.busy_rejections.fetch_add(1, std::memory_order_relaxed);
  job->fail(why);
  return false;
}

namespace {

// Calls that lock rows: one writer at a time takes them (see ledger.hpp).
bool locks_rows(const Ledger::Order& order) {
  return order.phase == Ledger::Order::reservations || order.phase == Ledger::Order::intents ||
         order.phase == Ledger::Order::runs;
}

}  // namespace

int Ledger::lane_of(const Job& job) const { return lanes_ ? job.lane() : 0; }

bool Ledger::takeable(const Job& job) const { return !locks_rows(job.order) || !writing_[lane_of(job)]; }

bool Ledger::any_takeable() const {
  return std::any_of(queue_.begin(), queue_.end(), [&](const auto& j) { return takeable(*j); });
}

std::vector<std::unique_ptr<Ledger::Job>> Ledger::take_batch() {
  std::vector<std::unique_ptr<Job>> batch;
  auto first = std::find_if(queue_.begin(), queue_.end(), [&](const auto& job) { return takeable(*job); });
  if (first == queue_.end()) return batch;
  batch.push_back(std::move(*first));
  queue_.erase(first);
  if (batch.front()->order.phase == Order::alone) return batch;
  // One lane's locking calls per batch: the lane of the first one.
  std::optional<int> lane;
  if (locks_rows(batch.front()->order)) lane = lane_of(*batch.front());
  auto fits = [&](const Job& job) {
    if (!locks_rows(job.order)) return true;
    if (!lane) lane = lane_of(job);
    return lane_of(job) == *lane;
  };
  // Group commit: every call waiting now joins this transaction.
  for (auto it = queue_.begin(); it != queue_.end() && batch.size() < options_.max_batch;) {
    if ((*it)->order.phase != Order::alone && takeable(**it) && fits(**it)) {
      batch.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  // The lock order; equal keys keep their queue order.
  std::stable_sort(batch.begin(), batch.end(),
                   [](const auto& a, const auto& b) { return a->order < b->order; });
  return batch;
}

void Ledger::run_batch(Store& store, std::vector<std::unique_ptr<Job>>& batch) {
  if (batch.size() == 1 && batch.front()->admission()) {
    if (auto whole = store.admit_alone(*batch.front()->admission())) {
      if (*whole) {
        stats_.batches.fetch_add(1, std::memory_order_relaxed);
        stats_.batched_jobs.fetch_add(1, std::memory_order_relaxed);
        stats_.reserve_batches.fetch_add(1, std::memory_order_relaxed);
        stats_.reservations.fetch_add(1, std::memory_order_relaxed);
      }
      batch.front()->keep_admission(std::move(*whole));
      batch.front()->finish();
      return;
    }
  }
  std::vector<Job*> reservers, chargers, recorders;
  for (auto& job : batch) {
    if (job->reservation()) reservers.push_back(job.get());
    if (job->charge()) chargers.push_back(job.get());
    if (job->outcome()) recorders.push_back(job.get());
  }
  // Runs by id: the lock order (stable: one run's calls keep their order).
  std::stable_sort(chargers.begin(), chargers.end(),
                   [](Job* a, Job* b) { return a->charge()->run < b->charge()->run; });
  auto body = [&] {
    // Runs first (by id: the lock order), then intents: an admission's
    // counted charge lets its reservation begin the first attempt.
    if (!chargers.empty()) {
      std::vector<ChargeRequest> requests;
      requests.reserve(chargers.size());
      for (auto* c : chargers) requests.push_back(*c->charge());
      auto results = store.count_calls(requests);
      for (std::size_t i = 0; i < chargers.size(); ++i) chargers[i]->keep_charge(std::move(results[i]));
    }
    if (!reservers.empty()) {
      // The batch's reservations: one multi-row statement.
      std::vector<ReserveRequest> requests;
      requests.reserve(reservers.size());
      for (auto* r : reservers) requests.push_back(std::move(*r->reservation()));
      auto results = store.reserve_intents(requests);
      for (std::size_t i = 0; i < reservers.size(); ++i) {
        *reservers[i]->reservation() = std::move(requests[i]);  // back: the batch may run again
        reservers[i]->keep(std::move(results[i]));
      }
    }
    if (!recorders.empty()) {
      // The batch's outcomes, in queue order per intent (the sort was
      // stable). With one lane they go before the other calls on intents,
      // which may have been decided from an outcome not durable yet; with
      // two they never share a batch, and a retry decided from a pending
      // retryable outcome waits until it is durable (outcome_recorder).
      std::vector<Outcome> outcomes;
      outcomes.reserve(recorders.size());
      for (auto* r : recorders) outcomes.push_back(std::move(*r->outcome()));
      auto results = store.record_outcomes(outcomes);
      for (std::size_t i = 0; i < recorders.size(); ++i) {
        *recorders[i]->outcome() = std::move(outcomes[i]);
        recorders[i]->keep_outcome(std::move(results[i]));
      }
    }
    for (auto& job : batch)
      if (!job->reservation() && !job->charge() && !job->outcome()) job->run(store);
    // Last: intents this batch reserved itself, locked by it already.
    std::vector<Job*> starters;
    std::vector<AttemptRequest> starts;
    for (auto& job : batch)
      if (auto start = job->first_attempt()) {
        starters.push_back(job.get());
        starts.push_back(*start);
      }
    if (!starts.empty()) {
      auto results = store.begin_attempts(starts, options_.replica_id);
      for (std::size_t i = 0; i < starters.size(); ++i) starters[i]->keep_start(std::move(results[i]));
    }
  };
  // Outcomes of answers the agents have already, and nothing else: a lost
  // one is recovered by its attempt's lease, so the commit need not wait
  // for the disk (and the next admission's flush does not queue behind it).
  bool const deferred = std::all_of(batch.begin(), batch.end(), [](const auto& job) {
    const auto* o = job->outcome();
    return o && o->after_answer;
  });
  auto const durability = deferred ? Store::Durability::deferred : Store::Durability::flushed;
  error_code failed;
  if (batch.size() == 1 && !batch.front()->multi_step() && !deferred) {
    body();  // its own transaction: no savepoint needed
  } else if (batch.size() == 1) {
    // One caller's steps (an admission alone) share its fate: no savepoints.
    // A deadlock or serialisation failure rolled all of it back: run it
    // again, as a savepoint would have, a bounded number of times.
    for (int tries = 0; tries < 3; ++tries) {
      failed = store.batch(body, Store::Calls::together, durability);
      if (failed != errc::conflict) break;
    }
  } else {
    failed = store.batch(body, Store::Calls::isolated, durability);
  }
  if (failed) {
    for (auto& job : batch) job->fail(failed);
    return;
  }
  stats_.batches.fetch_add(1, std::memory_order_relaxed);
  stats_.batched_jobs.fetch_add(batch.size(), std::memory_order_relaxed);
  if (!reservers.empty()) {
    stats_.reserve_batches.fetch_add(1, std::memory_order_relaxed);
    stats_.reservations.fetch_add(reservers.size(), std::memory_order_relaxed);
  }
  for (auto& job : batch) job->finish();
}

void Ledger::work(Store& store) {
  for (;;) {
    std::vector<std::unique_ptr<Job>> batch;
    bool writer = false;
    bool more = false;
    int lane = 0;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || any_takeable(); });
      if (queue_.empty()) return;
      batch = take_batch();
      auto locker = std::find_if(batch.begin(), batch.end(), [](const auto& j) { return locks_rows(j->order); });
      writer = batch.front()->order.phase != Order::alone && locker != batch.end();
      if (writer) {
        lane = lane_of(**locker);
        writing_[lane] = true;
      }
      // What this batch left that can be taken now is another idle
      // worker's (each worker that takes wakes the next: one wake-up per
      // batch, not one per worker).
      more = any_takeable();
    }
    if (more) ready_.notify_one();
    run_batch(store, batch);
    if (writer) {
      {
        std::lock_guard lock(mutex_);
        writing_[lane] = false;
        // The calls that queued up meanwhile are the next batch.
        more = any_takeable();
      }
      if (more) ready_.notify_one();
    }
  }
}

template <class T, class Op>
Awaitable<T> Ledger::call(Order order, Op op) {
  stats_.calls.fetch_add(1, std::memory_order_relaxed);
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(Result<T>)>(
      [this, order = std::move(order), op = std::move(op)](auto handler) mutable {
        using Handler = decltype(handler);
        enqueue(std::make_unique<CallJob<T, Op, Handler>>(std::move(order), std::move(op),
                                                          std::move(handler), stats_));
      },
      asio::use_awaitable);
}

template <class T, template <class> class JobT, class Request>
Awaitable<T> Ledger::submit(Request request) {
  stats_.calls.fetch_add(1, std::memory_order_relaxed);
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(Result<T>)>(
      [this, request = std::move(request)](auto handler) mutable {
        using Handler = decltype(handler);
        enqueue(std::make_unique<JobT<Handler>>(std::move(request), std::move(handler), stats_));
      },
      asio::use_awaitable);
}

Awaitable<Reservation> Ledger::reserve_intent(ReserveRequest request, RequestSnapshot snapshot) {
  request.request_snapshot = redact_request(snapshot, options_.redact);
  return submit<Reservation, ReserveJob>(std::move(request));
}

Awaitable<Admission> Ledger::admit(AdmitRequest request, RequestSnapshot snapshot) {
  request.reserve.request_snapshot = redact_request(snapshot, options_.redact);
  if (request.first_attempt) request.first_attempt->replica = options_.replica_id;
  return submit<Admission, AdmitJob>(std::move(request));
}

Awaitable<AttemptStart> Ledger::begin_attempt(AttemptRequest request) {
  return call<AttemptStart>(intent_order(request.intent_id),
                            [request, replica = options_.replica_id](Store& s) {
                              return s.begin_attempt(request, replica);
                            });
}

Awaitable<Intent> Ledger::record_outcome(Outcome outcome) {
  if (outcome.response)
    outcome.response =
        redact_response(std::move(*outcome.response), options_.redact, options_.response_cap);
  return submit<Intent, OutcomeJob>(std::move(outcome));
}

Awaitable<Intent> Ledger::mark_unknown(std::int64_t intent_id, int attempt) {
  Outcome outcome;
  outcome.intent_id = intent_id;
  outcome.attempt = attempt;
  outcome.state = IntentState::unknown;
  outcome.answer_class = "unknown";
  return record_outcome(std::move(outcome));
}

Awaitable<Intent> Ledger::find_intent(std::int64_t intent_id) {
  return call<Intent>(unlocked, [intent_id](Store& s) { return s.find_intent(intent_id); });
}

Awaitable<Intent> Ledger::find_intent_by_key(std::string key) {
  return call<Intent>(unlocked,
                      [key = std::move(key)](Store& s) { return s.find_intent_by_key(key); });
}

Awaitable<std::vector<Intent>> Ledger::list_intents_by_run(std::string run, int limit) {
  return call<std::vector<Intent>>(unlocked, [run = std::move(run), limit](Store& s) {
    return s.list_intents_by_run(run, limit);
  });
}

Awaitable<std::int64_t> Ledger::count_intents(std::string run, std::string tool,
                                              std::string answer_class,
                                              std::int64_t except_intent) {
  return call<std::int64_t>(unlocked, [run = std::move(run), tool = std::move(tool),
                                       answer_class = std::move(answer_class),
                                       except_intent](Store& s) {
    return s.count_intents(run, tool, answer_class, except_intent);
  });
}

Awaitable<std::vector<Intent>> Ledger::list_unknown_past_ttl(int limit) {
  return call<std::vector<Intent>>(unlocked,
                                   [limit](Store& s) { return s.list_unknown_past_ttl(limit); });
}

Awaitable<std::vector<Intent>> Ledger::list_unescalated_unknowns(int limit) {
  return call<std::vector<Intent>>(unlocked,
                                   [limit](Store& s) { return s.list_unescalated_unknowns(limit); });
}

Awaitable<std::vector<Intent>> Ledger::claim_lookups(std::vector<LookupDue> due, int limit) {
  return call<std::vector<Intent>>(alone, [due = std::move(due), limit](Store& s) {
    return s.claim_lookups(due, limit);
  });
}

Awaitable<RunCharge> Ledger::count_call(std::string run, std::int64_t budget, CallKind kind) {
  return submit<RunCharge, ChargeJob>(ChargeRequest{std::move(run), budget, kind});
}

Awaitable<Run> Ledger::find_run(std::string run) {
  return call<Run>(unlocked, [run = std::move(run)](Store& s) { return s.find_run(run); });
}

Awaitable<Run> Ledger::freeze_run(std::string run, std::string reason) {
  return call<Run>(alone, [run = std::move(run), reason = std::move(reason)](Store& s) {
    return s.set_run_state(run, RunState::frozen, reason);
  });
}

Awaitable<Run> Ledger::unfreeze_run(std::string run) {
  return call<Run>(alone, [run = std::move(run)](Store& s) {
    return s.set_run_state(run, RunState::active, "");
  });
}

Awaitable<Run> Ledger::kill_run(std::string run, std::string reason) {
  return call<Run>(alone, [run = std::move(run), reason = std::move(reason)](Store& s) {
    return s.set_run_state(run, RunState::killed, reason);
  });
}

Awaitable<std::int64_t> Ledger::persist_escalation(EscalationRequest request) {
  // Named locals only: GCC 12 destroys temporaries of a co_await expression twice.
  Order order = unlocked;
  auto op = [request](Store& s) { return s.persist_escalation(request); };
  auto id = co_await call<std::int64_t>(std::move(order), std::move(op));
  if (id && escalation_observer_) escalation_observer_(*id, request);
  co_return id;
}

Awaitable<Escalation> Ledger::find_escalation(std::int64_t id) {
  return call<Escalation>(unlocked, [id](Store& s) { return s.find_escalation(id); });
}

Awaitable<std::vector<Escalation>> Ledger::list_escalations(std::optional<EscalationState> state,
                                                            int limit) {
  return call<std::vector<Escalation>>(
      unlocked, [state, limit](Store& s) { return s.list_escalations(state, limit); });
}

Awaitable<Escalation> Ledger::resolve_escalation(ResolveRequest request) {
  return call<Escalation>(
      alone, [request = std::move(request)](Store& s) { return s.resolve_escalation(request); });
}

Awaitable<void> Ledger::record_refusal(std::int64_t intent_id, std::string reason_code) {
  return call<void>(unlocked, [intent_id, reason_code = std::move(reason_code)](Store& s) {
    return s.record_refusal(intent_id, reason_code);
  });
}

Awaitable<Signals> Ledger::read_signals(TimePoint since) {
  return call<Signals>(unlocked, [since](Store& s) { return s.read_signals(since); });
}

Awaitable<int> Ledger::recover_expired() {
  return call<int>(alone, [](Store& s) { return s.recover_expired(); });
}

}  // namespace idemgate::ledger
