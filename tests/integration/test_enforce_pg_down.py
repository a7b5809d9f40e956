"""PostgreSQL stopped under a running proxy: guarded writes fail closed with
503 ledger_unavailable and the provider sees nothing; once PostgreSQL is
back the same proxy (no restart) dispatches again. Stopped after an attempt
began, the answer is the provider's outcome (or a wait), never "nothing was
sent". Uses its own throwaway PostgreSQL (scripts/pg) so stopping it cannot
disturb other tests."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from admin_common import AdminProxy, admin_config  # noqa: E402
from enforce_common import call, new_run  # noqa: E402
from harness import Proxy, wait_until  # noqa: E402
from provider import Provider  # noqa: E402
from unknown_common import (UnknownAssertions, config, dispatch_in_background, ops,  # noqa: E402
                            retry_until_settled, tool)

PG = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "pg")
CHARGE = {"amount": 5, "currency": "eur"}


class PostgresDownTest(UnknownAssertions, unittest.TestCase):
    def setUp(self):
        self.pgdir = tempfile.mkdtemp(prefix="idemgate-pg.")
        out = subprocess.run([PG, "start", self.pgdir], capture_output=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        self.url = out.stdout.decode().strip()
        self.addCleanup(lambda: subprocess.run([PG, "stop", self.pgdir], capture_output=True, timeout=60))

    def pgctl(self, *args):
        out = subprocess.run([PG, "ctl", self.pgdir, *args], capture_output=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr.decode())

    def test_stopped_postgres_fails_closed_then_recovers(self):
        with Provider() as provider:
            directory = tempfile.mkdtemp(prefix="idemgate-admin.")
            self.addCleanup(shutil.rmtree, directory, True)
            proxy = AdminProxy(admin_config(provider.port, self.url, directory), directory).start()
            self.addCleanup(proxy.stop)
            run = new_run()
            ok = call(proxy, "POST", provider.url("/v1/charges"), dict(CHARGE, n=1), run=run)
            self.assertEqual(ok.status, 200, ok.body)

            self.pgctl("stop", "-m", "fast")
            down = call(proxy, "POST", provider.url("/v1/charges"), dict(CHARGE, n=2), run=run)
            self.assertEqual(down.status, 503, down.body)
            self.assertEqual(down.json()["reason_code"], "ledger_unavailable")
            self.assertTrue(down.headers.get("retry-after"))
            self.assertEqual(len(provider.writes()), 1, "a write left while the ledger was down")
            # A body with two readings is refused before the ledger is asked:
            # the same certain 403 with the ledger down, not a 503 to retry.
            twice = call(proxy, "POST", provider.url("/v1/charges"),
                         b'{"amount":5,"amount":6,"currency":"eur"}', run=run)
            self.assertEqual(twice.status, 403, twice.body)
            self.assertEqual(twice.json()["reason_code"], "policy_deny")
            self.assertIsNone(twice.headers.get("retry-after"))
            self.assertEqual(len(provider.writes()), 1)
            # The lease sweep (every second) fails while the ledger is away:
            # counted each time, said once when it starts failing.
            def events(name):
                return [line for line in proxy.log_lines() if line.get("event") == name]

            def sweep_failures():
                text = proxy.admin("GET", "/metrics").body.decode()
                lines = [l for l in text.splitlines() if l.startswith("idemgate_lease_sweep_failures_total ")]
                return float(lines[0].split()[-1]) if lines else 0
            wait_until(lambda: sweep_failures() >= 2, 15, "two failed lease sweeps")
            self.assertEqual(len(events("lease_sweep_failed")), 1)

            self.pgctl("start")

            def dispatched_again():
                a = call(proxy, "POST", provider.url("/v1/charges"), dict(CHARGE, n=3), run=run)
                return a.status == 200

            wait_until(dispatched_again, 30, "the proxy to use PostgreSQL again")
            self.assertEqual(len(provider.effects_snapshot()), 2)
            # And says when sweeps succeed again, with how many failed.
            wait_until(lambda: events("lease_sweep_recovered"), 15, "a lease_sweep_recovered line")
            failed = events("lease_sweep_failed")
            recovered = events("lease_sweep_recovered")
            self.assertEqual(len(recovered), 1, recovered)
            self.assertGreaterEqual(recovered[0]["failures"], 2)
            self.assertEqual(len(failed), 1, failed)  # under a minute down: one line
            self.assertEqual(failed[0]["failures"], 1)
            self.assertTrue(failed[0]["error"])

    # PostgreSQL stops after an attempt began: the provider has the charge,
    # the ledger cannot record it. Never "nothing was sent", never a 5xx for
    # a charge the provider made; once PostgreSQL is back the outcome lands
    # and the agent's retry gets the one charge.
    def test_ledger_lost_after_dispatch_never_says_nothing_was_sent(self):
        with Provider() as provider:
            proxy = Proxy(config(self.url, [tool("pay.charge", "/v1/charges", provider.port, inline="2s")],
                                 response="10s")).start()
            self.addCleanup(proxy.stop)
            run = new_run()
            url = provider.url("/v1/charges")
            provider.script("hold")
            t, first = dispatch_in_background(proxy, url, CHARGE, run, provider)
            provider.wait_held()
            self.pgctl("stop", "-m", "fast")
            provider.release()
            t.join(60)
            answer = first["answer"]
            text = answer.body.decode().lower()
            self.assertNotIn("nothing was sent", text)
            self.assertFalse(500 <= answer.status < 600, "a 5xx for a charge the provider made: %d %s"
                             % (answer.status, answer.body))
            self.assertNotEqual(answer.header("idemgate-decision"), "refused", answer.body)
            self.assertTrue(answer.header("idemgate-class"))
            if answer.status == 200:
                self.assertEqual(answer.json()["id"], provider.effects_snapshot()[0]["id"])
            else:
                self.assert_wait(answer, "reconciling")
            self.assertEqual(len(provider.writes()), 1)

            self.pgctl("start")

            again = retry_until_settled(proxy, url, CHARGE, run, 40)
            self.assertEqual(again.status, 200, again.body)
            self.assertEqual(again.json()["id"], provider.effects_snapshot()[0]["id"])
            self.assertEqual(len(provider.effects_snapshot()), 1)
            self.assertEqual(len(provider.keys_seen()), 1)
            intents = ops(proxy, "intents", "show", "--run", run)
            self.assertEqual([i["state"] for i in intents], ["completed"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
