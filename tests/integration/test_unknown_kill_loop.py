"""kill -9 of idemgate mid-dispatch, over and over, at random moments, under
load: each iteration takes an idemgate on the same SQLite ledger, sends LOAD
new charges at once and SIGKILLs the process somewhere between before the
requests arrived and after they were answered (provider latency 20-80 ms):
some kills land after an answer went out but before its outcome, recorded
after the answer, was durable. At the end one idemgate
serves the agent, which retries every charge until it is settled. Killed
processes never come back, so their attempts are settled only once their
leases have passed (connect + idle + response + outcome_record: 3 s here).
Exactly one effect per charge the provider ever saw, one key per charge,
and no intent left neither completed nor unknown-and-escalated.
IDEMGATE_KILL_SEED replays a run's timing."""
import os
import random
import sys
import tempfile
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(__file__))
from harness import wait_until  # noqa: E402
from provider import Provider  # noqa: E402
from unknown_common import (LedgerBackend, Proxy, UnknownAssertions, call, config, escalations, new_run,  # noqa: E402
                            ops, retry_until_settled, tool)

ITERATIONS = 50
LOAD = 3
PREFETCH = 4


class KillLoopTest(LedgerBackend, UnknownAssertions, unittest.TestCase):
    BACKEND = "sqlite"

    def test_kill_9_mid_dispatch_loop(self):
        seed = int(os.environ.get("IDEMGATE_KILL_SEED") or random.randrange(1 << 30))
        print("IDEMGATE_KILL_SEED=%d" % seed)
        rnd = random.Random(seed)
        directory = tempfile.mkdtemp(prefix="idemgate-kill-")
        with Provider(latency=(0.02, 0.08)) as provider:
            cfg = config(self.ledger_for(directory),
                         [tool("pay.charge", "/v1/charges", provider.port, bound=2, inline="1s")],
                         connect="500ms", response="500ms", idle="1s", drain="1s", outcome_record="1s")
            url = provider.url("/v1/charges")
            run = new_run()
            bodies = [{"amount": 100 + i, "currency": "eur", "customer": "cus_kill_%d" % i}
                      for i in range(ITERATIONS * LOAD)]
            threads = []
            phases = {"before": 0, "mid_dispatch": 0, "answered": 0}
            # Starting a process is the slow part: the next few start while
            # one is used (they share the ledger, as replicas would).
            with ThreadPoolExecutor(max_workers=PREFETCH) as pool:
                starting = [pool.submit(Proxy(cfg).start) for _ in range(PREFETCH)]
                for i in range(ITERATIONS):
                    proxy = starting.pop(0).result()
                    self.addCleanup(proxy.stop)
                    if i + PREFETCH < ITERATIONS:
                        starting.append(pool.submit(Proxy(cfg).start))
                    load = bodies[i * LOAD:(i + 1) * LOAD]
                    gots = [{} for _ in load]
                    for body, got in zip(load, gots):
                        t = threading.Thread(target=self._swallow, args=(proxy, url, body, run, got), daemon=True)
                        t.start()
                        threads.append(t)
                    tags = [('"%s"' % body["customer"]).encode() for body in load]
                    # The kill's random moment is the point of the test: mostly
                    # after a charge reached the provider (mid-dispatch, or
                    # just after its answer), sometimes before.
                    if rnd.random() < 0.2:
                        time.sleep(rnd.uniform(0.0, 0.05))
                    else:
                        wait_until(lambda: any(tag in w[4] for w in provider.writes() for tag in tags), 30,
                                   "a charge to leave")
                        time.sleep(rnd.uniform(0.0, 0.1))
                    proxy.proc.kill()
                    proxy.proc.wait(10)
                    for tag, got in zip(tags, gots):
                        arrived = any(tag in w[4] for w in provider.writes())
                        phases["answered" if "answer" in got else "mid_dispatch" if arrived else "before"] += 1
            for t in threads:
                t.join(10)

            final = Proxy(cfg).start()
            self.addCleanup(final.stop)
            outcomes = {}
            deadline = time.monotonic() + 45
            for body in bodies:
                answer = retry_until_settled(final, url, body, run, max(1.0, deadline - time.monotonic()))
                outcomes[body["customer"]] = answer
            for customer, answer in outcomes.items():
                if answer.status != 200:
                    self.assert_unknown_package(answer)  # the only other acceptable end
            settled = sum(1 for a in outcomes.values() if a.status == 200)
            print("iterations %d x %d charges (killed before dispatch %d, mid-dispatch %d, after the answer %d), "
                  "settled %d, dispatches %d, effects %d" % (ITERATIONS, LOAD, phases["before"], phases["mid_dispatch"],
                                                 phases["answered"], settled, len(provider.writes()),
                                                 len(provider.effects_snapshot())))
            self.assertGreaterEqual(phases["mid_dispatch"], 10, "too few kills landed mid-dispatch: %s" % phases)

            for body in bodies:
                tag = '"%s"' % body["customer"]
                effects = [e for e in provider.effects_snapshot() if tag in e["body"]]
                self.assertLessEqual(len(effects), 1, effects)
                keys = {w[5] for w in provider.writes() if tag.encode() in w[4]}
                self.assertLessEqual(len(keys), 1, "one charge went out under %d keys" % len(keys))
                if outcomes[body["customer"]].status == 200:
                    self.assertEqual(len(effects), 1)
                    self.assertEqual(outcomes[body["customer"]].json()["id"], effects[0]["id"])

            intents = ops(final, "intents", "show", "--run", run)
            self.assertEqual(len(intents), ITERATIONS * LOAD, [i["state"] for i in intents])
            escalated = {e.get("intent_id") for e in escalations(final) if e["run"] == run and e["state"] == "open"}
            for intent in intents:
                ok = intent["state"] == "completed" or (intent["state"] == "unknown" and intent["id"] in escalated)
                self.assertTrue(ok, intent)

    @staticmethod
    def _swallow(proxy, url, body, run, got):
        try:
            got["answer"] = call(proxy, "POST", url, body, run=run, timeout=10)
        except Exception:  # noqa: BLE001 - idemgate is killed under this request
            pass


if __name__ == "__main__":
    unittest.main(verbosity=2)
