// Prometheus text exposition of the process's counters (see metrics.hpp).
#include "proxy/metrics.hpp"

#include "ledger/ledger.hpp"
#include "proxy/body_budget.hpp"
#include "proxy/worker.hpp"
#include "tls/leaf_minter.hpp"

#include <cstdio>
#include <map>

namespace idemgate::proxy {

namespace {

// Label values: backslash, double quote and newline escaped.
std::string escape(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

class Writer {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void sample(std::string_view name, std::string_view labels, double value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      out_ += labels;
      out_ += '}';
    }
    out_ += ' ';
    out_ += number(value);
    out_ += '\n';
  }
  void single(std::string_view name, std::string_view type, std::string_view help, double value) {
    family(name, type, help);
    sample(name, {}, value);
  }
  void histogram(std::string_view name, std::string_view help, const std::vector<const ledger::LatencyHistogram*>& hs) {
    family(name, "histogram", help);
    std::uint64_t cumulative = 0;
    double sum = 0;
    auto const& bounds = ledger::LatencyHistogram::bounds_s;
    for (std::size_t i = 0; i <= bounds.size(); ++i) {
      for (auto const* h : hs) cumulative += h->count_in(i);
      std::string const le = i < bounds.size() ? number(bounds[i]) : "+Inf";
      sample(std::string(name) + "_bucket", "le=\"" + le + "\"", static_cast<double>(cumulative));
    }
    for (auto const* h : hs) sum += h->sum_seconds();
    sample(std::string(name) + "_sum", {}, sum);
    sample(std::string(name) + "_count", {}, static_cast<double>(cumulative));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

template <class F>
double total(const std::vector<Worker*>& workers, F field) {
  std::uint64_t sum = 0;
  for (auto* w : workers) sum += field(w->stats()).load(std::memory_order_relaxed);
  return static_cast<double>(sum);
}

}  // namespace

std::string render_metrics(const MetricsSources& src, const ledger::Signals* signals) {
  Writer w;
  w.family("idemgate_build_info", "gauge", "The running idemgate's version (always 1).");
  w.sample("idemgate_build_info", "version=\"" + escape(src.version) + "\"", 1);

  // Decisions: every worker's counts, summed by label set.
  std::map<DecisionStats::Labels, std::uint64_t> decisions;
  for (auto* worker : src.workers)
    for (auto const& [labels, n] : worker->decisions().snapshot()) decisions[labels] += n;
  w.family("idemgate_decisions_total", "counter",
           "Answers to requests matched to a tool, by tool, decision, class and reason_code.");
  for (auto const& [l, n] : decisions)
    w.sample("idemgate_decisions_total",
             "tool=\"" + escape(l[0]) + "\",decision=\"" + escape(l[1]) + "\",class=\"" + escape(l[2]) +
                 "\",reason_code=\"" + escape(l[3]) + "\"",
             static_cast<double>(n));

  std::vector<const ledger::LatencyHistogram*> upstream;
  for (auto* worker : src.workers) upstream.push_back(&worker->stats().upstream_latency);
  w.histogram("idemgate_upstream_exchange_duration_seconds",
              "Guarded exchanges with an upstream, from connect to the complete answer.", upstream);

  auto const& ws = src.workers;
  w.single("idemgate_connections_accepted_total", "counter", "Client connections accepted.",
           total(ws, [](WorkerStats& s) -> auto& { return s.connections; }));
  w.single("idemgate_connections_open", "gauge", "Client connections open now.",
           total(ws, [](WorkerStats& s) -> auto& { return s.connections; }) -
               total(ws, [](WorkerStats& s) -> auto& { return s.connections_closed; }));
  w.single("idemgate_connections_idle_buffered", "gauge",
           "Idle client connections still holding their read buffer (given back after 1 to 2 s of quiet).",
           total(ws, [](WorkerStats& s) -> auto& { return s.idle_buffered; }));
  w.single("idemgate_requests_total", "counter", "Client requests read.",
           total(ws, [](WorkerStats& s) -> auto& { return s.requests; }));
  w.single("idemgate_tunnels_total", "counter", "CONNECT tunnels opened blind.",
           total(ws, [](WorkerStats& s) -> auto& { return s.tunnels; }));
  w.single("idemgate_intercepted_total", "counter", "CONNECTs whose TLS idemgate terminated.",
           total(ws, [](WorkerStats& s) -> auto& { return s.intercepted; }));
  w.single("idemgate_problems_total", "counter", "problem+json answers idemgate wrote itself.",
           total(ws, [](WorkerStats& s) -> auto& { return s.problems; }));
  w.single("idemgate_upstream_connects_total", "counter", "Upstream connections opened.",
           total(ws, [](WorkerStats& s) -> auto& { return s.upstream_connects; }));
  w.single("idemgate_guarded_budget_bytes", "gauge",
           "Bytes of guarded request bodies and answer buffers held now, of limits.guarded_budget.",
           static_cast<double>(guarded_body_budget().in_use()));
  w.single("idemgate_guarded_answers_cut_by_budget_total", "counter",
           "Guarded answers buffered short of limits.guarded_answer because limits.guarded_budget was full "
           "(the rest streamed on; the stored copy is truncated).",
           total(ws, [](WorkerStats& s) -> auto& { return s.answers_cut_by_budget; }));
  w.single("idemgate_egress_denied_total", "counter", "Requests refused by the egress guard.",
           total(ws, [](WorkerStats& s) -> auto& { return s.egress_denied; }));

  if (src.ledger) {
    auto& ledger = *src.ledger;
    auto const& ls = ledger.stats();
    auto load = [](const std::atomic<std::uint64_t>& a) { return static_cast<double>(a.load(std::memory_order_relaxed)); };
    w.single("idemgate_ledger_calls_total", "counter", "Ledger calls made.", load(ls.calls));
    w.single("idemgate_ledger_errors_total", "counter", "Ledger calls that completed with an error.", load(ls.errors));
    w.single("idemgate_ledger_busy_rejections_total", "counter", "Ledger calls refused because the queue was full.",
             load(ls.busy_rejections));
    w.single("idemgate_ledger_queue_depth", "gauge", "Ledger calls waiting for a worker now.",
             static_cast<double>(ledger.queued()));
    w.single("idemgate_ledger_queue_limit", "gauge", "Queued ledger calls beyond which calls are refused.",
             static_cast<double>(ledger.options().queue_limit));
    w.single("idemgate_ledger_transactions_total", "counter", "Ledger transactions committed (group commit).",
             load(ls.batches));
    w.single("idemgate_ledger_transaction_calls_total", "counter",
             "Calls those transactions carried (divided by transactions: the mean batch size).", load(ls.batched_jobs));
    w.single("idemgate_ledger_reservations_total", "counter", "Intents reserved.", load(ls.reservations));
    w.single("idemgate_ledger_direct_admissions_total", "counter",
             "Lone admissions written from the network thread itself (PostgreSQL).", load(ls.direct_admissions));
    w.single("idemgate_ledger_reservation_reruns_total", "counter",
             "Reservations run again after a live fingerprint refused their fresh insert (PostgreSQL).",
             static_cast<double>(ledger.reservation_reruns()));
    w.single("idemgate_lease_sweep_horizon_misses_total", "counter",
             "Lease sweeps committed without reading their horizon in time (PostgreSQL): the first attempts "
             "begun with their reservations wait for the next sweep.",
             static_cast<double>(ledger.horizon_misses()));
    w.histogram("idemgate_ledger_call_duration_seconds", "Ledger calls from enqueue to result, commit included.",
                {&ls.latency});
  }
  w.single("idemgate_ledger_up", "gauge", "1 when this scrape could read the ledger.", signals ? 1 : 0);
  if (signals) {
    w.family("idemgate_escalations_open", "gauge", "Open escalations waiting for a human, by reason_code.");
    for (auto const& r : signals->open_escalations)
      w.sample("idemgate_escalations_open", "reason_code=\"" + escape(r.reason_code) + "\"",
               static_cast<double>(r.count));
    w.single("idemgate_intents_unknown_past_ttl", "gauge", "Intents whose outcome is still unknown past reconcile.ttl.",
             static_cast<double>(signals->unknown_past_ttl));
    w.single("idemgate_duplicate_receipts", "gauge",
             "Local keys that saw more than one provider receipt (must stay 0).",
             static_cast<double>(signals->duplicate_receipts));
  }

  if (src.minter) {
    auto const s = src.minter->stats();
    w.single("idemgate_tls_leaf_cache_entries", "gauge", "Minted leaf certificates cached.", static_cast<double>(s.cached));
    w.single("idemgate_tls_leaves_minted_total", "counter", "Leaf certificates signed.", static_cast<double>(s.minted));
    w.single("idemgate_tls_leaf_cache_hits_total", "counter", "Leaf requests answered from the cache.",
             static_cast<double>(s.cache_hits));
    w.single("idemgate_tls_leaf_cache_evictions_total", "counter", "Leaves dropped from the cache.",
             static_cast<double>(s.evicted));
    w.single("idemgate_tls_leaf_mint_failures_total", "counter", "Leaf mints that failed.", static_cast<double>(s.failed));
  }
  if (src.server) {
    w.single("idemgate_config_reloads_total", "counter", "Config reloads applied (SIGHUP).",
             static_cast<double>(src.server->config_reloads.load(std::memory_order_relaxed)));
    w.single("idemgate_config_reload_failures_total", "counter", "Config reloads refused (the old config was kept).",
             static_cast<double>(src.server->config_reload_failures.load(std::memory_order_relaxed)));
    w.single("idemgate_lease_sweep_failures_total", "counter",
             "Sweeps for attempts whose lease ended (every second) that failed: nothing recovered then.",
             static_cast<double>(src.server->lease_sweep_failures.load(std::memory_order_relaxed)));
  }
  if (src.sweeper) {
    w.single("idemgate_sweeper_passes_total", "counter", "Escalation sweeper passes over the ledger's unknowns.",
             static_cast<double>(src.sweeper->passes.load(std::memory_order_relaxed)));
    w.single("idemgate_sweeper_escalations_total", "counter", "Unknowns past reconcile.ttl the sweeper escalated.",
             static_cast<double>(src.sweeper->escalated.load(std::memory_order_relaxed)));
    w.single("idemgate_sweeper_lookups_total", "counter", "Background lookups of query-mode unknowns (one per intent).",
             static_cast<double>(src.sweeper->lookups.load(std::memory_order_relaxed)));
    w.single("idemgate_sweeper_settled_total", "counter", "Unknowns a background lookup found and settled as completed.",
             static_cast<double>(src.sweeper->settled.load(std::memory_order_relaxed)));
  }
  if (src.notify) {
    auto const& n = *src.notify;
    w.single("idemgate_notify_delivered_total", "counter", "Escalation packages the webhook accepted.",
             static_cast<double>(n.delivered.load(std::memory_order_relaxed)));
    w.single("idemgate_notify_failures_total", "counter", "Webhook POSTs that failed (each is retried).",
             static_cast<double>(n.attempts_failed.load(std::memory_order_relaxed)));
    w.single("idemgate_notify_dropped_total", "counter", "Packages given up on after the last retry.",
             static_cast<double>(n.dropped.load(std::memory_order_relaxed)));
    w.single("idemgate_notify_queue_depth", "gauge", "Packages waiting for delivery.",
             static_cast<double>(n.queued.load(std::memory_order_relaxed)));
  }
  return w.take();
}

}  // namespace idemgate::proxy
