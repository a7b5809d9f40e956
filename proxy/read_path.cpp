// The read path (see read_path.hpp).
#include "proxy/read_path.hpp"

#include "ledger/ledger.hpp"
#include "policy/reason.hpp"
#include "proxy/answers.hpp"
#include "proxy/dispatch.hpp"
#include "proxy/ledger_room.hpp"
#include "proxy/read_tracker.hpp"
#include "proxy/worker.hpp"
#include "ledger/executor.hpp"

#include <boost/asio/as_tuple.hpp>

namespace idemgate::proxy {

namespace asio = boost::asio;
using policy::VerdictKind;

Task<ForwardResult> run_read_path(Call& c) {
  policy::DecisionInput in;
  in.now = std::chrono::system_clock::now();
  in.missing_required = c.missing;
  auto charge = co_await with_ledger_room(
      [&] { return c.ledger.count_call(std::string(c.run), c.cfg.runs.budget, ledger::CallKind::read); });
  if (!charge) co_return co_await answer_ledger_down(c);
  apply_charge(c, *charge, in);
  std::string const key = c.run + "\n" + c.tool.name + "\n" + c.fp.hex;
  for (int turn = 0; turn < 2; ++turn) {
    in.now = std::chrono::system_clock::now();
    in.intent = c.worker.reads().view(key);
    c.attempt = in.intent.attempts + 1;
    auto verdict = policy::decide(c.tool, in, {});
    if (verdict.kind == VerdictKind::hold && turn == 0) {
      auto const wait =
          std::chrono::duration_cast<std::chrono::milliseconds>(*verdict.hold_until - std::chrono::system_clock::now());
      if (wait.count() > 0) {
        SteadyTimer timer(co_await asio::this_coro::executor, wait);
        co_await timer.async_wait(asio::as_tuple(use_task));
      }
      c.decision = "held";
      continue;
    }
    if (verdict.kind == VerdictKind::wait) co_return co_await answer_wait(c, verdict);
    if (verdict.kind != VerdictKind::dispatch && verdict.kind != VerdictKind::hold)
      co_return co_await answer_refusal(c, verdict);
    Sent s = co_await send_upstream(c, {});
    c.answer_class = std::string(policy::to_string(s.cls.answer_class));
    if (s.egress_refused)
      co_return co_await answer_refusal(c, refusal(policy::ReasonCode::egress_denied,
                                                   s.answer.problem->detail + "; nothing was sent"));
    std::optional<std::chrono::system_clock::time_point> not_before;
    if (s.cls.retry_after) not_before = s.at + *s.cls.retry_after;
    c.worker.reads().record(key, s.cls.answer_class, not_before);
    if (s.answer.outcome != policy::TransportOutcome::answered) co_return co_await answer_problem(c, *s.answer.problem);
    co_return co_await answer_upstream(c, s.answer);
  }
  co_return co_await answer_refusal(c, refusal(policy::ReasonCode::unclassified_fail_closed,
                                               "the read could not be decided"));
}

}  // namespace idemgate::proxy
