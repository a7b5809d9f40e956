// The queue's engine behind the async facade (see ledger.hpp): opening the
// ledger, the workers, and group commit. A call is a Job (ledger_jobs.hpp,
// made by ledger_calls.cpp) holding the awaiting coroutine's completion
// handler; a worker takes a batch of Jobs, runs them in one Store::batch()
// transaction, and posts each Result back to its handler's executor once the
// batch committed, keeping that executor's work count up meanwhile so its
// io_context does not return.
#include "ledger/ledger.hpp"

#include "ledger/ledger_jobs.hpp"
#include "ledger/open_store.hpp"

#include <algorithm>
#include <optional>

namespace idemgate::ledger {
namespace {

// An outcome that waits for others to share its commit (outcome_gather).
bool gathers(const Ledger::Job& job) { return job.not_before != std::chrono::steady_clock::time_point{}; }

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
  options.outcome_gather = config.outcome_gather;
  options.redact = redact;
  auto ledger = std::make_unique<Ledger>(std::move(*stores), std::move(options));
  ledger->admit_directly(open_direct_admit(config));
  return ledger;
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
    // A direct admission still in flight is one whose io_context no longer
    // runs (a forced stop): it never releases the writer, and the workers
    // must not wait for it to write the outcomes they keep.
    if (direct_writing_) writing_[0] = direct_writing_ = false;
    // Outcomes recorded after their answers are still written (stopping,
    // they start at once): the answers are out, and a lost record costs a
    // reconciliation. The rest complete with shutting_down.
    std::deque<std::unique_ptr<Job>> kept;
    for (auto& job : queue_) {
      auto const* o = job->outcome();
      (o && o->after_answer ? kept : abandoned).push_back(std::move(job));
    }
    queue_.swap(kept);
    gathering_ = static_cast<std::size_t>(
        std::count_if(queue_.begin(), queue_.end(), [](const auto& job) { return gathers(*job); }));
  }
  ready_.notify_all();
  for (auto& job : abandoned) job->fail(errc::shutting_down);
  for (auto& worker : workers_) worker.join();
}

std::size_t Ledger::queued() {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

std::uint64_t Ledger::stores_total(std::uint64_t (Store::*count)() const noexcept) const noexcept {
  std::uint64_t total = 0;
  for (const auto& store : stores_) total += (*store.*count)();
  return total;
}

std::uint64_t Ledger::reservation_reruns() const noexcept { return stores_total(&Store::reservation_reruns); }

std::uint64_t Ledger::horizon_misses() const noexcept { return stores_total(&Store::horizon_misses); }

bool Ledger::enqueue(std::unique_ptr<Job> job) {
  error_code why;
  bool wake = true;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      why = errc::shutting_down;
    } else if (queue_.size() >= options_.queue_limit) {
      why = errc::queue_full;
    } else {
      // An outcome after its answer, on a lane of its own, waits a moment
      // for others to share its commit: at low load one statement and one
      // wake-up records several. A worker already waiting for an earlier one
      // takes it along. With one lane (SQLite) it would instead join the
      // next admission's batch, on that request's path: it does not wait.
      if (auto const* o = job->outcome();
          lanes_ && o && o->after_answer && options_.outcome_gather.count() > 0)
        job->not_before = std::chrono::steady_clock::now() + options_.outcome_gather;
      const Job& queued = *job;
      queue_.push_back(std::move(job));
      if (gathers(queued)) {
        ++gathering_;
        // Only while its lane's writer is free: a busy lane 1 writer takes
        // the outcome, or waits for its time, when its batch ends (it comes
        // back to the top of work()), and a worker woken meanwhile would find
        // nothing it may take and sleep again: a wake-up and two context
        // switches for every outcome queued while a batch of them is written
        // (about one write in nine at 256 connections). While the writer is
        // free: a full gather now, else a first waiter for its time, or an
        // earlier one.
        wake = takeable(queued) && (full_gather() || !timed_wait_ || *timed_wait_ > start_time(queued));
      } else {
        // A call waiting for its lane's writer is in that writer's next
        // batch, or one right after it past a batch's room (it looks again
        // when it finishes): waking an idle worker now would only put it
        // back to sleep, a context switch per call.
        wake = takeable(queued);
      }
    }
  }
  if (!why) {
    // Idle workers are alike (any of them may take any call that can be
    // taken now): one is enough.
    if (wake) ready_.notify_one();
    return true;
  }
  if (why == errc::queue_full) stats_.busy_rejections.fetch_add(1, std::memory_order_relaxed);
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

bool Ledger::claim_direct() {
  std::lock_guard lock(mutex_);
  if (stopping_ || writing_[0] || crowded_) return false;
  // Admissions already waiting for the writer: this one joins them (their
  // batch, or the one after it past a batch's room).
  for (const auto& job : queue_)
    if (locks_rows(job->order) && lane_of(*job) == 0) return false;
  writing_[0] = true;
  direct_writing_ = true;
  return true;
}

void Ledger::release_direct() {
  bool more = false;
  {
    std::lock_guard lock(mutex_);
    writing_[0] = false;
    direct_writing_ = false;
    // What can start now, or a gathering outcome whose timed waiter (if
    // any) sleeps past its time now that the admission is back.
    more = worker_needed(std::chrono::steady_clock::now());
  }
  if (more) ready_.notify_one();
}

bool Ledger::takeable(const Job& job) const { return !locks_rows(job.order) || !writing_[lane_of(job)]; }

std::chrono::steady_clock::time_point Ledger::start_time(const Job& job) const {
  // A gathering outcome does not start while a direct admission is on the
  // wire (for up to one more outcome_gather): its statement would share the
  // server's CPUs, and its WAL, with the admission that a request waits
  // for. release_direct wakes a worker for it as soon as the admission is
  // back. A batch's worth of them (full_gather) starts even so: holding
  // more would fill the queue.
  if (gathers(job) && direct_writing_) return job.not_before + options_.outcome_gather;
  return job.not_before;
}

std::size_t Ledger::gather_limit() const {
  return std::max<std::size_t>(1, std::min(options_.max_batch, options_.queue_limit / 4));
}

bool Ledger::full_gather() const { return gathering_ >= gather_limit(); }

bool Ledger::startable(const Job& job, std::chrono::steady_clock::time_point now) const {
  return takeable(job) && (stopping_ || start_time(job) <= now || (gathers(job) && full_gather()));
}

std::unique_ptr<Ledger::Job> Ledger::take(std::deque<std::unique_ptr<Job>>::iterator& it) {
  auto job = std::move(*it);
  it = queue_.erase(it);
  if (gathers(*job)) --gathering_;
  return job;
}

bool Ledger::any_startable(std::chrono::steady_clock::time_point now) const {
  return std::any_of(queue_.begin(), queue_.end(), [&](const auto& j) { return startable(*j, now); });
}

std::optional<std::chrono::steady_clock::time_point> Ledger::next_start() const {
  std::optional<std::chrono::steady_clock::time_point> next;
  for (const auto& job : queue_)
    if (takeable(*job) && (!next || start_time(*job) < *next)) next = start_time(*job);
  return next;
}

bool Ledger::worker_needed(std::chrono::steady_clock::time_point now) const {
  // One pass: startable implies takeable, and "the first takeable start is
  // before the timed waiter's time" is "some takeable start is".
  return std::any_of(queue_.begin(), queue_.end(), [&](const auto& job) {
    return takeable(*job) && (startable(*job, now) || !timed_wait_ || start_time(*job) < *timed_wait_);
  });
}

std::vector<std::unique_ptr<Ledger::Job>> Ledger::take_batch(std::chrono::steady_clock::time_point now) {
  std::vector<std::unique_ptr<Job>> batch;
  auto first = std::find_if(queue_.begin(), queue_.end(), [&](const auto& job) { return startable(*job, now); });
  if (first == queue_.end()) return batch;
  batch.push_back(take(first));
  if (batch.front()->order.phase == Order::alone) return batch;
  // One lane's locking calls per batch: the lane of the first one.
  std::optional<int> lane;
  if (locks_rows(batch.front()->order)) lane = lane_of(*batch.front());
  auto fits = [&](const Job& job) {
    if (!locks_rows(job.order)) return true;
    if (!lane) lane = lane_of(job);
    return lane_of(job) == *lane;
  };
  // Group commit: every call waiting now joins this transaction (those still
  // gathering too: they were waiting for a batch to share), up to a batch's
  // room. The admissions' lane's is smaller with two lanes: at 256
  // connections one batch of every admission waiting moves them as one
  // wave, which the network thread and PostgreSQL then work on in turn; in
  // batches of at most 128 the largest waves split and the two overlap
  // more, and guarded writes went about 6% faster (bench/HISTORY.md,
  // 2026-12-07 18:05Z-18:57Z).
  auto room = [&] {
    return lanes_ && lane == 0 ? std::min(options_.admission_batch, options_.max_batch) : options_.max_batch;
  };
  for (auto it = queue_.begin(); it != queue_.end() && batch.size() < room();) {
    if ((*it)->order.phase != Order::alone && takeable(**it) && fits(**it)) {
      batch.push_back(take(it));
    } else {
      ++it;
    }
  }
  // The lock order; equal keys keep their queue order.
  std::stable_sort(batch.begin(), batch.end(),
                   [](const auto& a, const auto& b) { return a->order < b->order; });
  return batch;
}

namespace {

// Moves a batch's requests back into their jobs (`where` gives each job's),
// at now() or, if the store's call threw, when this goes: a batch that runs
// again, or a watcher that records its outcome again, finds them as they were.
template <class T>
class PutBack {
 public:
  PutBack(const std::vector<Ledger::Job*>& jobs, std::vector<T>& moved, T* (Ledger::Job::*where)())
      : jobs_(jobs), moved_(moved), where_(where) {}
  PutBack(const PutBack&) = delete;
  PutBack& operator=(const PutBack&) = delete;
  ~PutBack() { now(); }
  void now() noexcept {
    if (std::exchange(done_, true)) return;
    for (std::size_t i = 0; i < jobs_.size(); ++i) *(jobs_[i]->*where_)() = std::move(moved_[i]);
  }

 private:
  const std::vector<Ledger::Job*>& jobs_;
  std::vector<T>& moved_;
  T* (Ledger::Job::*where_)();
  bool done_ = false;
};

}  // namespace

error_code Ledger::run_batch(Store& store, std::vector<std::unique_ptr<Job>>& batch) {
  if (batch.size() == 1 && batch.front()->admission()) {
    if (auto whole = store.admit_alone(*batch.front()->admission())) {
      if (*whole) {
        stats_.batches.fetch_add(1, std::memory_order_relaxed);
        stats_.batched_jobs.fetch_add(1, std::memory_order_relaxed);
        stats_.reserve_batches.fetch_add(1, std::memory_order_relaxed);
        stats_.reservations.fetch_add(1, std::memory_order_relaxed);
      }
      batch.front()->keep_admission(std::move(*whole));
      return {};
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
      {
        PutBack back(reservers, requests, &Job::reservation);  // the batch may run again
        auto results = store.reserve_intents(requests);
        back.now();
        for (std::size_t i = 0; i < reservers.size(); ++i) reservers[i]->keep(std::move(results[i]));
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
      {
        // Back however the call ends: a watched outcome is its watcher's,
        // which records it again after a failure (Ledger::OutcomeWatcher).
        PutBack back(recorders, outcomes, &Job::outcome);
        auto results = store.record_outcomes(outcomes);
        back.now();
        for (std::size_t i = 0; i < recorders.size(); ++i) recorders[i]->keep_outcome(std::move(results[i]));
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
  // Admissions and nothing else: each of their steps is one statement for
  // the whole batch (the charges, the reservations, the first attempts), so
  // a step that fails fails them all anyway. Without savepoints the batch
  // is a third of the round trips, and a failure leaves no charge committed
  // for a reservation that was not.
  bool const admissions = std::all_of(batch.begin(), batch.end(), [](const auto& job) { return job->admission(); });
  error_code failed;
  if (batch.size() == 1 && !batch.front()->multi_step() && !deferred) {
    body();  // its own transaction: no savepoint needed
  } else if (batch.size() == 1 || admissions) {
    // One caller's steps (an admission alone), or admissions alone, share
    // their fate: no savepoints. A deadlock or serialisation failure rolled
    // all of it back: run it again, as a savepoint would have, a bounded
    // number of times. So does a PostgreSQL reservation inserted fresh that
    // a live fingerprint refused (PgStore::reserve_intents), at most once:
    // the store's next reservations are careful. One try more than the
    // three a deadlock may take, so that a refusal takes none of those.
    for (int tries = 0; tries < 4; ++tries) {
      failed = store.batch(body, Store::Calls::together, durability);
      if (failed != errc::conflict) break;
    }
  } else {
    failed = store.batch(body, Store::Calls::isolated, durability);
  }
  if (failed) return failed;
  stats_.batches.fetch_add(1, std::memory_order_relaxed);
  stats_.batched_jobs.fetch_add(batch.size(), std::memory_order_relaxed);
  if (!reservers.empty()) {
    stats_.reserve_batches.fetch_add(1, std::memory_order_relaxed);
    stats_.reservations.fetch_add(reservers.size(), std::memory_order_relaxed);
  }
  return {};
}

void Ledger::work(Store& store) {
  for (;;) {
    std::vector<std::unique_ptr<Job>> batch;
    bool writer = false;
    bool more = false;
    bool done = false;
    int lane = 0;
    {
      std::unique_lock lock(mutex_);
      auto now = std::chrono::steady_clock::now();
      while (!any_startable(now)) {
        if (stopping_ && queue_.empty()) return;
        // Nothing to start: wait for a call, a writer's end, or the time a
        // gathering outcome may start.
        if (auto next = next_start(); next && !stopping_) {
          if (!timed_wait_ || *next < *timed_wait_) timed_wait_ = *next;
          ready_.wait_until(lock, *next);
          if (timed_wait_ && *timed_wait_ <= *next) timed_wait_.reset();
        } else {
          ready_.wait(lock);
        }
        now = std::chrono::steady_clock::now();
      }
      batch = take_batch(now);
      auto locker = std::find_if(batch.begin(), batch.end(), [](const auto& j) { return locks_rows(j->order); });
      writer = batch.front()->order.phase != Order::alone && locker != batch.end();
      if (writer) {
        lane = lane_of(**locker);
        writing_[lane] = true;
      }
      // What this batch left that can be taken now is another idle
      // worker's (each worker that takes wakes the next: one wake-up per
      // batch, not one per worker). So is an outcome still gathering that
      // no worker waits for (this one may have been its timed waiter), or
      // that is due before the time the waiting worker sleeps to (one
      // queued while its lane was busy, which woke no one): otherwise it
      // would wait for the end of this batch, or for that later time.
      more = worker_needed(now);
      done = stopping_ && queue_.empty();
    }
    // Stopping, the last calls are taken: the other workers may end.
    if (done) {
      ready_.notify_all();
    } else if (more) {
      ready_.notify_one();
    }
    auto const failed = run_batch(store, batch);
    if (writer) {
      auto const admissions = std::count_if(batch.begin(), batch.end(), [](const auto& j) { return j->admission(); });
      bool last = false;
      {
        std::lock_guard lock(mutex_);
        writing_[lane] = false;
        if (admissions > 0) crowded_ = admissions > 1;
        last = stopping_;
      }
      // The calls that queued up meanwhile are the next batch: this worker,
      // awake already, takes it at the top of the loop once it has answered
      // this one's (and wakes another for what it leaves). Stopping, the
      // other workers were waiting for this lane to be free.
      if (last) ready_.notify_all();
    }
    // Answered once the writer is free: a caller whose next admission
    // follows its answer at once finds the lane free (and may send it
    // directly) instead of queueing behind a batch that has ended.
    for (auto& job : batch) {
      if (failed) {
        job->fail(failed);
      } else {
        job->finish();
      }
    }
  }
}


}  // namespace idemgate::ledger
