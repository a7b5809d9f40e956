"""The outcome is recorded after the answer went out: a retry of the same
charge sent on the same connection the moment the answer arrives, before the
outcome can be durable, is answered with the stored response (a replay), never
409 in_flight, and the provider sees each charge once. Other agents keep the
ledger's writer busy meanwhile, so the outcome waits for the next group commit
and the retry's reservation joins that same commit, ahead of the outcome (the
window a retry in this process must not fall into). reconcile.inline is 0s,
so a retry that found the attempt in flight would get 409 in_flight at once
instead of waiting for it inside the request. SQLite and PostgreSQL."""
import http.client
import json
import os
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from provider import Provider  # noqa: E402
from unknown_common import LedgerBackend, Proxy, call, config, new_run, tool  # noqa: E402

CHARGES = 40
BACKGROUND = 3  # agents writing other charges all along


class RetryBeforeDurable(LedgerBackend):
    def test_retry_on_the_heels_of_the_answer_is_a_replay(self):
        directory = tempfile.mkdtemp(prefix="idemgate-after-")
        with Provider() as provider:
            cfg = config(self.ledger_for(directory), [tool("pay.charge", "/v1/charges", provider.port, inline="0s")],
                         connect="5s", response="10s")
            proxy = Proxy(cfg).start()
            self.addCleanup(proxy.stop)
            url = provider.url("/v1/charges")
            run = new_run()
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
            self.addCleanup(conn.close)
            headers = {"Idemgate-Run": run, "Content-Type": "application/json"}

            def post(body):
                conn.request("POST", url, json.dumps(body), headers)
                res = conn.getresponse()
                return res.status, dict((k.lower(), v) for k, v in res.getheaders()), res.read()

            stop = threading.Event()
            background = {"sent": 0}

            def other_agent(n):
                j = 0
                while not stop.is_set():
                    call(proxy, "POST", url, {"amount": 1, "currency": "eur", "customer": "cus_bg_%d_%d" % (n, j)},
                         run=run, timeout=30)
                    background["sent"] += 1
                    j += 1

            agents = [threading.Thread(target=other_agent, args=(n,), daemon=True) for n in range(BACKGROUND)]
            for t in agents:
                t.start()
            self.addCleanup(stop.set)
            replays = 0
            for i in range(CHARGES):
                body = {"amount": 500 + i, "currency": "eur", "customer": "cus_after_%d" % i}
                status, first_headers, first = post(body)
                self.assertEqual(status, 200, first)
                status, again_headers, again = post(body)
                self.assertEqual(status, 200, "retry %d: %d %s %s" % (i, status, again_headers, again))
                self.assertEqual(again_headers.get("idempotent-replayed"), "true", again_headers)
                self.assertEqual(json.loads(again)["id"], json.loads(first)["id"])
                replays += 1
            stop.set()
            for t in agents:
                t.join(30)
            self.assertEqual(replays, CHARGES)
            mine = [e for e in provider.effects_snapshot() if '"cus_after_' in e["body"]]
            self.assertEqual(len(mine), CHARGES)
            self.assertEqual(len(provider.effects_snapshot()), CHARGES + background["sent"])


class SqliteRetryBeforeDurable(RetryBeforeDurable, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresRetryBeforeDurable(RetryBeforeDurable, unittest.TestCase):
    BACKEND = "postgresql"


if __name__ == "__main__":
    unittest.main(verbosity=2)
