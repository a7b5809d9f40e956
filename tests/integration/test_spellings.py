"""Every spelling of a guarded write is that write, or is refused; none walks
around the gate. The upstream here is the worst case: it normalises paths the
lax way many servers do (percent-decoding everything, '\\' and %2F as '/',
dropping ";params", empty and dot segments) and does NOT deduplicate, so
each request that reaches it as a charge is one more charge. Every spelling
is sent after the plain one with the same body: matched, it is the same
intent and is replayed (one effect in all); refused, nothing reaches the
upstream. Runs on both ledgers."""
import http.client
import os
import posixpath
import sys
import threading
import unittest
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.dirname(__file__))
from enforce_common import call, escalations, ledger_url, ops  # noqa: E402
from harness import Proxy  # noqa: E402
from upstream import ServerThread  # noqa: E402


def lax_path(raw):
    path = urllib.parse.unquote(raw.split("?", 1)[0]).replace("\\", "/")
    path = "/".join(segment.split(";", 1)[0] for segment in path.split("/"))
    return posixpath.normpath("/" + path.lstrip("/")).replace("//", "/")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        owner = self.server.owner
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        with owner.lock:
            owner.requests.append(self.path)
            if lax_path(self.path) == "/v1/charges":
                owner.charges.append(self.path)
                body = b'{"id": "ch_%d"}' % len(owner.charges)
            else:
                body = b'{"id": "other"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST


class LaxUpstream(ServerThread):
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.charges = []
        super().__init__(_Handler)


CONFIG = """\
listen: 127.0.0.1:0
threads: 2
ledger: {{ url: "{ledger}" }}
egress: {{ allow_hosts: ["*"], allow_loopback: true, allow_private: true }}
timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 2s, idle: 10s, drain: 5s }}
tools:
  - name: pay.charge
    match: {{ host: localhost, port: {port}, method: POST, path: /v1/charges }}
    effect: money
    idempotency: {{ honoured: false }}
    reconcile: {{ mode: none }}
    receipt: /id
  - name: pay.charge_by_ip
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/charges }}
    effect: money
    idempotency: {{ honoured: false }}
    reconcile: {{ mode: none }}
    receipt: /id
"""

CHARGE = {"amount": 1000, "currency": "eur"}

SAME_WRITE = [
    "http://localhost:{port}/v1/%63harges",
    "http://localhost:{port}/v1/%63%68arges",
    "http://localhost:{port}/v1//charges",
    "http://localhost:{port}//v1/charges",
    "http://localhost:{port}/v1/./charges",
    "http://localhost:{port}/v1/x/../charges",
    "http://localhost:{port}/v1/%2E/charges",
    "http://localhost:{port}/v1/charges/",
    "http://LOCALHOST:{port}/v1/charges",
    "http://LocalHost.:{port}/v1/charges",
    "http://localhost.:{port}/v1//./%63harges",
]

REFUSED = [
    "http://localhost:{port}/v1%2Fcharges",
    "http://localhost:{port}/v1%2fcharges",
    "http://localhost:{port}/v1%5Ccharges",
    "http://localhost:{port}/v1/charges;x=1",
    "http://LOCALHOST.:{port}/v1/x%2F..%2Fcharges",
]


class SpellingCases:
    BACKEND = "sqlite"

    def setUp(self):
        self.upstream = LaxUpstream().__enter__()
        self.addCleanup(self.upstream.__exit__, None, None, None)
        self.proxy = Proxy("")
        self.proxy.dir = self.proxy.dir
        with open(self.proxy.config_path, "w") as f:
            f.write(CONFIG.format(ledger=ledger_url(self.BACKEND, self.proxy.dir), port=self.upstream.port))
        self.proxy.start()
        self.addCleanup(self.proxy.stop)
        self.run_id = "run-" + uuid.uuid4().hex[:12]

    def post(self, url):
        return call(self.proxy, "POST", url.format(port=self.upstream.port), CHARGE, run=self.run_id)

    def test_every_equivalent_spelling_is_the_same_intent(self):
        first = self.post("http://localhost:{port}/v1/charges")
        self.assertEqual(first.status, 200, first.body)
        self.assertEqual(first.header("idemgate-decision"), "forwarded")
        self.assertEqual(first.header("idemgate-tool"), "pay.charge")
        for url in SAME_WRITE:
            with self.subTest(url=url):
                again = self.post(url)
                self.assertEqual(again.header("idemgate-tool"), "pay.charge", again.body)
                self.assertEqual(again.header("idemgate-decision"), "replayed", again.body)
                self.assertEqual(again.header("idempotent-replayed"), "true")
                self.assertEqual(again.json()["id"], "ch_1")
        self.assertEqual(self.upstream.charges, ["/v1/charges"])

        # An address is matched in its own spellings; one with a trailing dot
        # is no URL a client sends (400, nothing forwarded).
        by_ip = self.post("http://127.0.0.1:{port}/v1/charges")
        self.assertEqual(by_ip.header("idemgate-tool"), "pay.charge_by_ip")
        again = self.post("http://127.0.0.1:{port}/v1/./%63harges/")
        self.assertEqual(again.header("idemgate-tool"), "pay.charge_by_ip")
        self.assertEqual(again.header("idemgate-decision"), "replayed")
        dotted = self.post("http://127.0.0.1.:{port}/v1/charges")
        self.assertEqual(dotted.status, 400, dotted.body)
        self.assertEqual(dotted.json()["reason_code"], "malformed_request")
        self.assertEqual(len(self.upstream.charges), 2)
        self.assertEqual(len(self.upstream.requests), 2)

    def test_spellings_without_one_reading_are_refused_before_anything_is_sent(self):
        for url in REFUSED:
            with self.subTest(url=url):
                answer = self.post(url)
                self.assertEqual(answer.status, 403, answer.body)
                self.assertEqual(answer.header("content-type"), "application/problem+json")
                problem = answer.json()
                self.assertEqual(problem["reason_code"], "policy_deny")
                self.assertEqual(problem["tool"], "pay.charge")
                self.assertIn("/v1/charges", problem["detail"])
        self.assertEqual(self.upstream.requests, [])
        # An ambiguous path that no reading makes a write passes as before.
        other = self.post("http://localhost:{port}/v1/files%2Fx")
        self.assertEqual(other.status, 200)
        self.assertIsNone(other.header("idemgate-decision"))
        self.assertEqual(self.upstream.requests, ["/v1/files%2Fx"])
        self.assertEqual(self.upstream.charges, [])

    def test_a_body_that_names_a_member_twice_is_refused_before_anything_is_sent(self):
        # The worst case for a gate that reads one "amount" while the server
        # reads the other: a charge of 1 held for one of 1000. Each body has
        # no single reading, so none is sent, and the ledger never hears of
        # it: no intent, no charge to the run, no escalation.
        url = "http://localhost:{port}/v1/charges"
        json_type = {"Content-Type": "application/json"}
        form_type = {"Content-Type": "application/x-www-form-urlencoded"}
        for body, headers in ((b'{"amount":1000,"amount":1,"currency":"eur"}', json_type),
                              (b'{"amount":1,"amount":1,"currency":"eur"}', json_type),
                              (b'{"amount":1000,"meta":{"a":1,"\\u0061":2},"currency":"eur"}', json_type)):
            with self.subTest(body=body):
                answer = call(self.proxy, "POST", url.format(port=self.upstream.port), body, headers,
                              run=self.run_id)
                self.assertEqual(answer.status, 403, answer.body)
                self.assertEqual(answer.header("content-type"), "application/problem+json")
                problem = answer.json()
                self.assertEqual(problem["reason_code"], "policy_deny")
                self.assertEqual(problem["terminal"], "abort")
                self.assertEqual(problem["tool"], "pay.charge")
                self.assertIn("names a member twice", problem["detail"])
                self.assertEqual(answer.header("idemgate-decision"), "refused")
        self.assertEqual(self.upstream.requests, [])
        # The connection outlives the refusal (the body was read whole).
        conn = http.client.HTTPConnection("127.0.0.1", self.proxy.port, timeout=30)
        self.addCleanup(conn.close)
        for _ in range(2):
            conn.request("POST", url.format(port=self.upstream.port), body=b'{"amount":1,"amount":2}',
                         headers={"Content-Type": "application/json", "Idemgate-Run": self.run_id})
            again = conn.getresponse()
            self.assertEqual(again.status, 403)
            again.read()
            self.assertNotEqual((again.getheader("connection") or "").lower(), "close")
        self.assertEqual([e for e in escalations(self.proxy) if e["run"] == self.run_id], [])
        self.assertEqual(ops(self.proxy, "intents", "show", "--run", self.run_id), [])
        # A form that repeats a key is sent (a list to many servers); every
        # pair counts in its fingerprint, so another second copy is another
        # call, not a replay.
        for second in (b"1", b"2"):
            listed = call(self.proxy, "POST", url.format(port=self.upstream.port),
                          b"amount=5&currency=eur&tag=a&tag=" + second, form_type, run=self.run_id)
            self.assertEqual(listed.status, 200, listed.body)
            self.assertEqual(listed.header("idemgate-decision"), "forwarded")
        self.assertEqual(len(self.upstream.requests), 2)
        # The same member in two objects is no repeat: sent, once.
        sent = call(self.proxy, "POST", url.format(port=self.upstream.port),
                    b'{"amount":1000,"a":{"v":1},"b":{"v":1},"currency":"eur"}', run=self.run_id)
        self.assertEqual(sent.status, 200, sent.body)
        self.assertEqual(sent.header("idemgate-decision"), "forwarded")
        self.assertEqual(len(self.upstream.charges), 3)

    def test_two_spellings_sent_at_once_are_one_charge(self):
        results = []

        def send(url):
            results.append(self.post(url))

        threads = [threading.Thread(target=send, args=(u,)) for u in
                   ("http://localhost:{port}/v1/charges", "http://LOCALHOST.:{port}/v1/%63harges/")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(len(results), 2)
        self.assertEqual(len(self.upstream.charges), 1, [(r.status, r.body) for r in results])


class SqliteSpellings(SpellingCases, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresSpellings(SpellingCases, unittest.TestCase):
    BACKEND = "postgresql"


if __name__ == "__main__":
    unittest.main(verbosity=2)
