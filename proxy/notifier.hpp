// The escalation webhook (admin.notify): each package the ledger persisted
// is POSTed as JSON to admin.notify.url, signed with
// Idemgate-Signature: sha256=HEX (HMAC-SHA256 of the body under
// admin.notify.secret), retried with exponential backoff. It runs on the
// admin thread: the request path only queues (Ledger::observe_escalations),
// so a slow or dead webhook never delays an agent's answer.
#pragma once

#include "config/config.hpp"
#include "ledger/types.hpp"
#include "proxy/metrics.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace boost::asio::ssl {
class context;
}

namespace idemgate::proxy {

struct NotifyOptions {
  std::size_t queue_limit = 1000;  // packages waiting beyond this are dropped (logged, counted)
  int max_attempts = 8;            // POSTs per package
  std::chrono::milliseconds first_backoff{500};
  std::chrono::milliseconds max_backoff{60'000};
  std::chrono::milliseconds timeout{10'000};  // one POST, connect to answer
};

class Notifier {
 public:
  Notifier(boost::asio::io_context& ioc, config::Notify target, std::shared_ptr<boost::asio::ssl::context> tls,
           NotifyStats& stats, NotifyOptions options = {});

  // Any thread; never blocks on the network. An id already queued or sent
  // is not sent again.
  void enqueue(std::int64_t escalation_id, const ledger::EscalationRequest& request);
  // On the io_context's thread.
  void start();
  void stop();

  // The JSON body POSTed for a package (no secret in it).
  static std::string body_for(std::int64_t escalation_id, const ledger::EscalationRequest& request);

 private:
  struct Item {
    std::int64_t id = 0;
    std::string body;
  };
  Task<void> deliver_loop();
  // true on a 2xx answer; otherwise why says what went wrong.
  Task<bool> post(const Item& item, int attempt, std::string& why);

  boost::asio::io_context& ioc_;
  config::Notify target_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  NotifyStats& stats_;
  NotifyOptions options_;
  SteadyTimer wake_;
  std::mutex mutex_;
  std::deque<Item> queue_;
  std::set<std::int64_t> seen_;  // bounded: the oldest ids are forgotten first
  bool stopping_ = false;
};

}  // namespace idemgate::proxy
