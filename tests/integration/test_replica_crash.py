"""Two replicas share one ledger. Replica A dies (SIGKILL) while its write
is at the provider and never comes back; replica B waits while A's attempt
could still be running (its lease), then, once the lease has passed, B's
sweeper marks it unknown and B reconciles with the same key inside the
agent's request: exactly one effect, one key."""
import os
import sys
import time
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from enforce_common import call, make_config, new_run  # noqa: E402
from harness import Proxy  # noqa: E402
from provider import Provider  # noqa: E402

CHARGE = {"amount": 12, "currency": "eur", "customer": "cus_replica"}


class ReplicaCrashTest(unittest.TestCase):
    def test_dead_replica_attempt_is_recovered_by_the_other(self):
        with Provider() as provider:
            a = Proxy("", env={"IDEMGATE_REPLICA_ID": "replica-a"})
            ledger = "sqlite:" + os.path.join(a.dir, "ledger.db")
            # Short deadlines make A's lease (connect + idle + response + outcome_record) 4 s.
            cfg = make_config(provider.port, ledger, upstream_response="1s") \
                .replace("upstream_connect: 2s", "upstream_connect: 1s").replace("idle: 3s", "idle: 1s")
            with open(a.config_path, "w") as f:
                f.write(cfg)
            a.start()
            self.addCleanup(a.stop)
            b = Proxy(cfg, env={"IDEMGATE_REPLICA_ID": "replica-b"}).start()
            self.addCleanup(b.stop)
            run = new_run()
            provider.script("hold")
            threading.Thread(target=lambda: self._swallow(call, a, "POST", provider.url("/v1/charges"), CHARGE,
                                                          run=run), daemon=True).start()
            provider.wait_held()
            a.proc.kill()
            a.proc.wait(10)
            provider.release()

            # B waits on A's attempt inside the request (reconcile.inline, 10 s)
            # while A's lease (4 s) holds, then its sweeper marks the attempt
            # unknown and B reconciles it with the same key.
            answer = call(b, "POST", provider.url("/v1/charges"), CHARGE, run=run)
            self.assertEqual(answer.status, 200, answer.body)
            self.assertEqual(answer.header("idemgate-decision"), "reconciled")
            writes = provider.writes()
            self.assertEqual(len(writes), 2)
            self.assertGreaterEqual(writes[1][0] - writes[0][0], 3.5, "B re-sent while A's lease held")
            self.assertEqual(len(provider.effects_snapshot()), 1)
            self.assertEqual(len(provider.keys_seen()), 1)
            self.assertTrue(any(l.get("event") == "recovered_expired_attempts" for l in b.log_lines()))

    @staticmethod
    def _swallow(fn, *args, **kwargs):
        try:
            fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - replica A is killed under this request
            pass


if __name__ == "__main__":
    unittest.main(verbosity=2)
