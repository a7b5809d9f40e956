"""A moment's backlog in the ledger's queue costs latency, not a refusal:
with ledger.queue_limit at 2, concurrent guarded writes and reads find the
queue full, wait for room (up to a second) and all go through, each write
sent upstream exactly once; refusals past the run's budget still persist
their escalation packages (not 503 ledger_unavailable)."""
import http.client
import json
import os
import sqlite3
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import Proxy  # noqa: E402
from upstream import Upstream  # noqa: E402

CONFIG = """\
listen: 127.0.0.1:0
threads: 2
ledger: {{ url: "sqlite:./ledger.db", queue_limit: 2 }}
egress: {{ allow_hosts: ["*"], allow_loopback: true, allow_private: true }}
timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 5s, idle: 10s, drain: 10s }}
tools:
  - name: orders.create
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /orders }}
    effect: write
    idempotency: {{ mode: inject }}
  - name: orders.get
    match: {{ host: 127.0.0.1, port: {port}, method: GET, path: "/orders/{{id}}" }}
    effect: read
"""

CLIENTS = 8
EACH = 4


def order(conn, up, run, n, i):
    """POSTs client n's i-th order (a new intent) for `run`: (status, body)."""
    body = json.dumps({"order": "%d-%d" % (n, i)})
    conn.request("POST", up.url("/orders"), body, {"Content-Type": "application/json", "Idemgate-Run": run})
    r = conn.getresponse()
    return (r.status, r.read())


def run_clients(proxy, count, calls):
    """`count` clients at once, each on its own connection making calls(conn,
    n, i) for i in range(EACH); every list those return, joined."""
    results = []
    lock = threading.Lock()

    def client(n):
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        try:
            for i in range(EACH):
                got = calls(conn, n, i)
                with lock:
                    results.extend(got)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


class LedgerRoomTest(unittest.TestCase):
    def test_a_full_queue_is_waited_out(self):
        with Upstream() as up, Proxy(CONFIG.format(port=up.port)) as proxy:
            def write_then_read(conn, n, i):
                r = order(conn, up, "room", n, i)
                conn.request("GET", up.url("/orders/%d" % i), headers={"Idemgate-Run": "room"})
                g = conn.getresponse()
                g.read()
                return [r[0], g.status]

            statuses = run_clients(proxy, CLIENTS, write_then_read)
            self.assertEqual(len(statuses), 2 * CLIENTS * EACH)
            self.assertEqual([s for s in statuses if s != 200], [])
            posts = [r for r in up.requests if r.method == "POST"]
            self.assertEqual(len(posts), CLIENTS * EACH)  # each write sent once
            self.assertEqual(len({r.body for r in posts}), CLIENTS * EACH)
            self.assertEqual(proxy.stop(), 0)
            # The full queue was met (the waits were exercised) and every
            # call was charged to the run once: no try counted twice.
            stopped = [l for l in proxy.log_lines() if l.get("event") == "stopped"][-1]
            self.assertGreater(stopped["ledger_queue_full"], 0, stopped)
            with sqlite3.connect(os.path.join(proxy.dir, "ledger.db")) as db:
                calls = db.execute("SELECT calls FROM runs WHERE run_id = 'room'").fetchone()[0]
            self.assertEqual(calls, 2 * CLIENTS * EACH)

    def test_refusals_wait_for_room_too(self):
        # A refusal's escalation package meets the same full queue, and
        # waits for room as an admission does.
        budget = 8
        clients = 2 * CLIENTS  # more refusals at once: the queue is met more often
        config = CONFIG.replace("ledger: {{", "runs: {{ budget: %d }}\nledger: {{" % budget, 1)
        with Upstream() as up, Proxy(config.format(port=up.port)) as proxy:
            answers = run_clients(proxy, clients, lambda conn, n, i: [order(conn, up, "spent", n, i)])
            self.assertEqual(len(answers), clients * EACH)
            ok = [a for a in answers if a[0] == 200]
            refused = [json.loads(a[1]) for a in answers if a[0] == 403]
            self.assertEqual(len(ok), budget, [a for a in answers if a[0] not in (200, 403)])
            self.assertEqual(len(refused), clients * EACH - budget)
            self.assertEqual({p["reason_code"] for p in refused}, {"budget_exhausted"})
            # Every refusal's package was persisted on the request path.
            self.assertTrue(all(isinstance(p.get("escalation_id"), int) for p in refused), refused)
            self.assertEqual(len([r for r in up.requests if r.method == "POST"]), budget)
            self.assertEqual(proxy.stop(), 0)
            stopped = [l for l in proxy.log_lines() if l.get("event") == "stopped"][-1]
            self.assertGreater(stopped["ledger_queue_full"], 0, stopped)
            with sqlite3.connect(os.path.join(proxy.dir, "ledger.db")) as db:
                packages = db.execute("SELECT count(*) FROM escalations WHERE reason_code = 'budget_exhausted'").fetchone()[0]
            self.assertEqual(packages, clients * EACH - budget)


if __name__ == "__main__":
    unittest.main(verbosity=2)
