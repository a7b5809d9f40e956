"""Guarded answers in bounded memory: many large answers at once through a
guarded write tool reach every agent whole (the first limits.guarded_answer
bytes are buffered, the rest streams), the stored copy is marked truncated,
and the proxy's resident memory stays under a stated bound.
limits.guarded_budget counts what calls hold (a body and a 16 KiB answer
slice that grows with the answer): many more calls with small answers than
guarded_budget / guarded_answer are in flight at once; a call whose body and
slice do not fit gets 503 overloaded with Retry-After and the upstream sees
nothing of it; and an answer the budget cannot buffer whole once its request
was sent still reaches the agent whole, stored truncated. On both ledgers."""
import hashlib
import http.client
import json
import os
import sys
import threading
import unittest
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.dirname(__file__))
from admin_common import TOKEN, AdminProxy  # noqa: E402
from enforce_common import call, ledger_url, new_run  # noqa: E402
from harness import SMALL_QUARANTINE_ENV, Proxy, wait_until  # noqa: E402
from upstream import ServerThread  # noqa: E402

MIB = 1024 * 1024
ANSWER = 8 * MIB
CLIENTS = 12
# 12 answers of 8 MiB at once (96 MiB) may grow the proxy by at most this
# much: each holds a 1 MiB buffer, its stored 256 KiB copy and relay buffers.
# Before answers were bounded each was buffered whole, at least twice over
# (192 MiB and more here).
GROWTH_LIMIT_KIB = 96 * 1024
# The answer buffer a guarded call sets aside at intake (proxy/intake.cpp).
SLICE = 16 * 1024
RESPONSE_CAP = 256 * 1024  # ledger.response_cap's default
# The smallest budget config/validate.cpp allows with these limits: room for
# one call's largest body and whole answer buffer. Reserving a whole
# guarded_answer per call, it held one call at a time.
TIGHT = "inspect_body: 64KiB, guarded_answer: 1MiB, guarded_budget: 1088KiB"
BUDGET = 1088 * 1024
PAD = "x" * 60000  # a held call's body is about 60 KB: it and its slice take ~76 KB


def blob(seed, size):
    block = hashlib.sha256(seed.encode()).digest() * (65536 // 32)
    return (block * (size // len(block) + 1))[:size]


class _Handler(BaseHTTPRequestHandler):
    """POST /v1/exports?n=SIZE[&chunked=1]: one effect, answered with SIZE
    bytes derived from the request body. POST /v1/slow: one effect, answered
    only once the test releases it."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        owner = self.server.owner
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        with owner.lock:
            owner.effects.append((self.path, body))
            owner.cond.notify_all()
        if self.path.startswith("/v1/slow"):
            owner.release.wait(30)
            return self._answer(b'{"id":"slow"}', False)
        size = int(self.path.split("n=")[1].split("&")[0])
        self._answer(blob(body.decode(), size), "chunked=1" in self.path)

    def _answer(self, data, chunked):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        step = 256 * 1024
        for i in range(0, len(data), step):
            part = data[i:i + step]
            if chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            else:
                self.wfile.write(part)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class BlobUpstream(ServerThread):
    def __init__(self):
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.effects = []
        self.release = threading.Event()
        super().__init__(_Handler)

    def __exit__(self, *exc):
        self.release.set()
        super().__exit__(*exc)

    def count(self, prefix):
        with self.lock:
            return sum(1 for p, _ in self.effects if p.startswith(prefix))


TOOLS = """\
tools:
  - name: data.export
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/exports }}
    effect: write
    reconcile: {{ mode: same_key }}
  - name: data.slow
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/slow }}
    effect: write
    reconcile: {{ mode: same_key }}
"""


def config(port, ledger, limits):
    return ("listen: 127.0.0.1:0\nthreads: 2\n"
            "ledger: {{ url: \"{ledger}\" }}\n"
            "egress: {{ allow_hosts: [\"*\"], allow_loopback: true, allow_private: true }}\n"
            "timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 60s, idle: 60s, drain: 5s }}\n"
            "limits: {{ {limits} }}\n").format(ledger=ledger, limits=limits) + TOOLS.format(port=port)


def fetch(proxy, url, body, run):
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=120)
    conn.request("POST", url, body=body.encode(), headers={"Content-Type": "text/plain", "Idemgate-Run": run})
    r = conn.getresponse()
    digest = hashlib.sha256()
    total = 0
    while True:
        part = r.read(MIB)
        if not part:
            break
        digest.update(part)
        total += len(part)
    headers = {k.lower(): v for k, v in r.getheaders()}
    conn.close()
    return r.status, headers, total, digest.hexdigest()


class MemoryCases:
    BACKEND = "sqlite"

    def start(self, upstream, limits, env=None):
        proxy = Proxy("", env=env)
        with open(proxy.config_path, "w") as f:
            f.write(config(upstream.port, ledger_url(self.BACKEND, proxy.dir), limits))
        proxy.start()
        self.addCleanup(proxy.stop)
        return proxy

    def start_with_admin(self, upstream, limits):
        proxy = AdminProxy("")
        token_file = os.path.join(proxy.dir, "admin.token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        with open(proxy.config_path, "w") as f:
            f.write(config(upstream.port, ledger_url(self.BACKEND, proxy.dir), limits) +
                    "admin:\n  listen: 127.0.0.1:0\n  token_file: %s\n" % token_file)
        proxy.start()
        self.addCleanup(proxy.stop)
        return proxy

    def hold(self, proxy, upstream, run, bodies):
        """Calls to /v1/slow, one per body, all held open at the upstream
        (each past intake, holding its share of the budget) until released."""
        answers = [None] * len(bodies)

        def one(i):
            answers[i] = call(proxy, "POST", upstream.url("/v1/slow"), bodies[i], run=run, timeout=60)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        wait_until(lambda: upstream.count("/v1/slow") == len(bodies), 20,
                   "%d held calls at the upstream" % len(bodies))

        def release():
            upstream.release.set()
            for t in threads:
                t.join(30)
            return answers
        return release

    def metric(self, proxy, name):
        text = proxy.admin("GET", "/metrics").body.decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        self.fail("no %s in /metrics" % name)

    def test_many_large_answers_at_once_in_bounded_memory(self):
        with BlobUpstream() as upstream:
            proxy = self.start(upstream, "guarded_answer: 1MiB", env=SMALL_QUARANTINE_ENV)
            run = new_run()
            # Warm up (threads, pools, ledger) before the baseline.
            self.assertEqual(fetch(proxy, upstream.url("/v1/exports?n=1024"), "warm", run)[0], 200)
            baseline = proxy.rss_kib()
            results = [None] * CLIENTS

            def one(i):
                url = upstream.url("/v1/exports?n=%d%s" % (ANSWER, "&chunked=1" if i % 2 else ""))
                results[i] = fetch(proxy, url, "export-%d" % i, run)

            threads = [threading.Thread(target=one, args=(i,)) for i in range(CLIENTS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(180)
            peak = proxy.rss_peak_kib()
            growth = peak - baseline
            print("rss baseline %d KiB, peak %d KiB, growth %d KiB for %d answers of %d MiB at once"
                  % (baseline, peak, growth, CLIENTS, ANSWER // MIB))
            for i, (status, headers, total, digest) in enumerate(results):
                self.assertEqual(status, 200, "answer %d: %s" % (i, headers))
                self.assertEqual(total, ANSWER, "answer %d arrived with %d bytes" % (i, total))
                self.assertEqual(digest, hashlib.sha256(blob("export-%d" % i, ANSWER)).hexdigest())
            self.assertEqual(upstream.count("/v1/exports"), CLIENTS + 1)
            self.assertLess(growth, GROWTH_LIMIT_KIB, "proxy memory grew by %d KiB" % growth)

            # The stored copy is the first ledger.response_cap bytes, marked so.
            status, headers, total, _ = fetch(proxy, upstream.url("/v1/exports?n=%d&chunked=1" % ANSWER), "export-1", run)
            self.assertEqual(status, 200)
            self.assertEqual(headers.get("idemgate-decision"), "replayed")
            self.assertEqual(headers.get("idemgate-replay-truncated"), "true")
            self.assertEqual(total, 256 * 1024)
            self.assertEqual(upstream.count("/v1/exports"), CLIENTS + 1)

    def test_past_the_budget_overloaded_before_anything_is_sent(self):
        with BlobUpstream() as upstream:
            proxy = self.start_with_admin(upstream, TIGHT)
            run = new_run()
            # 14 held calls of ~76 KB leave ~43 KB: not enough for another
            # 60 KB body and its slice, enough for a small body's.
            release = self.hold(proxy, upstream, run, [{"n": i, "pad": PAD} for i in range(14)])
            big = {"n": "big", "pad": PAD}
            refused = call(proxy, "POST", upstream.url("/v1/exports?n=10"), big, run=run)
            self.assertEqual(refused.status, 503, refused.body)
            self.assertEqual(refused.json()["reason_code"], "overloaded")
            self.assertIn("limits.guarded_budget", refused.json()["detail"])
            self.assertEqual(refused.header("Content-Type"), "application/problem+json")
            self.assertGreaterEqual(int(refused.header("Retry-After")), 1)
            self.assertEqual(upstream.count("/v1/exports"), 0, "an overloaded call reached the upstream")
            # What is refused is bytes, not calls: a small one still fits.
            small = call(proxy, "POST", upstream.url("/v1/exports?n=10"), {"n": "small"}, run=run)
            self.assertEqual(small.status, 200, small.body)
            self.assertEqual(upstream.count("/v1/exports"), 1)
            self.assertGreater(self.metric(proxy, "idemgate_guarded_budget_bytes"), 14 * 60000)
            for answer in release():
                self.assertEqual(answer.status, 200, answer.body)
            # The budget is given back (a held call's reservation ends just
            # after its answer is written, perhaps on the other network
            # thread): the same call goes through, once.
            answers = []

            def through():
                answers.append(call(proxy, "POST", upstream.url("/v1/exports?n=10"), big, run=run))
                return answers[-1].status != 503

            wait_until(through, 10, "the held calls' budget to be given back")
            self.assertEqual(answers[-1].status, 200, answers[-1].body)
            self.assertEqual(upstream.count("/v1/exports"), 2)
            wait_until(lambda: self.metric(proxy, "idemgate_guarded_budget_bytes") == 0, 10,
                       "every reservation to be given back")

    def test_many_more_small_calls_at_once_than_whole_answer_buffers_fit(self):
        with BlobUpstream() as upstream:
            # Room for one whole 1 MiB answer buffer: 32 calls with small
            # answers all in flight at once, none refused.
            proxy = self.start(upstream, TIGHT)
            run = new_run()
            release = self.hold(proxy, upstream, run, [{"n": i} for i in range(32)])
            answers = release()
            for i, answer in enumerate(answers):
                self.assertEqual(answer.status, 200, "call %d: %s" % (i, answer.body))
                self.assertEqual(answer.json(), {"id": "slow"})
            self.assertEqual(upstream.count("/v1/slow"), 32)

    def test_a_large_answer_the_budget_cannot_buffer_streams_whole_and_is_stored_truncated(self):
        with BlobUpstream() as upstream:
            proxy = self.start_with_admin(upstream, TIGHT)
            run = new_run()
            # 12 held calls take ~917 KB of the 1088 KiB: the large answers
            # below are sent, then find no room for a 1 MiB buffer.
            release = self.hold(proxy, upstream, run, [{"n": i, "pad": PAD} for i in range(12)])
            for chunked in ("", "&chunked=1"):
                seed = "pressed" + chunked
                url = upstream.url("/v1/exports?n=%d%s" % (ANSWER, chunked))
                status, headers, total, digest = fetch(proxy, url, seed, run)
                self.assertEqual(status, 200, headers)
                self.assertEqual(total, ANSWER)
                self.assertEqual(digest, hashlib.sha256(blob(seed, ANSWER)).hexdigest())
                self.assertEqual(headers.get("idemgate-decision"), "forwarded")
                # The stored copy is what the budget let the buffer hold:
                # less than ledger.response_cap, which a cut at
                # limits.guarded_answer would have stored.
                status, headers, stored, digest = fetch(proxy, url, seed, run)
                self.assertEqual(status, 200)
                self.assertEqual(headers.get("idemgate-decision"), "replayed")
                self.assertEqual(headers.get("idemgate-replay-truncated"), "true")
                self.assertGreaterEqual(stored, SLICE)
                self.assertLess(stored, RESPONSE_CAP)
                self.assertEqual(digest, hashlib.sha256(blob(seed, ANSWER)[:stored]).hexdigest())
            self.assertEqual(upstream.count("/v1/exports"), 2, "a large answer's request was sent again")
            self.assertEqual(self.metric(proxy, "idemgate_guarded_answers_cut_by_budget_total"), 2)

            def cut():
                return [line for line in proxy.log_lines()
                        if line.get("event") == "decision" and line.get("answer_cut") == "limits.guarded_budget"]
            wait_until(lambda: len(cut()) >= 2, 10, "the decision lines of the cut answers")
            self.assertEqual(len(cut()), 2, cut())
            for answer in release():
                self.assertEqual(answer.status, 200, answer.body)


class SqliteMemory(MemoryCases, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresMemory(MemoryCases, unittest.TestCase):
    BACKEND = "postgresql"


if __name__ == "__main__":
    unittest.main(verbosity=2)
