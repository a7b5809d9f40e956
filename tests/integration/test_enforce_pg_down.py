"""PostgreSQL stopped under a running proxy: guarded writes fail closed with
503 ledger_unavailable and the provider sees nothing; once PostgreSQL is
back the same proxy (no restart) dispatches again. Uses its own throwaway
PostgreSQL (scripts/pg) so stopping it cannot disturb other tests."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from enforce_common import call, make_config, new_run  # noqa: E402
from harness import Proxy, wait_until  # noqa: E402
from provider import Provider  # noqa: E402

PG = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "pg")
CHARGE = {"amount": 5, "currency": "eur"}


class PostgresDownTest(unittest.TestCase):
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
            proxy = Proxy(make_config(provider.port, self.url)).start()
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

            self.pgctl("start")

            def dispatched_again():
                a = call(proxy, "POST", provider.url("/v1/charges"), dict(CHARGE, n=3), run=run)
                return a.status == 200

            wait_until(dispatched_again, 30, "the proxy to use PostgreSQL again")
            self.assertEqual(len(provider.effects_snapshot()), 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
