"""A guarded write never goes out on a pooled connection the upstream is
closing: an upstream that closes idle connections at about a second, with
writes arriving right at that moment, sees one effect per write and the
agent sees no unknown outcome. A write is resent on a fresh connection after
a stale one only when the provider honours the key; otherwise the outcome
stays unknown. On both ledgers."""
import json
import os
import socket
import sys
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.dirname(__file__))
from enforce_common import call, ledger_url, new_run  # noqa: E402
from harness import Proxy, proxy_side_has_fin, wait_until  # noqa: E402
from upstream import ServerThread  # noqa: E402

# The upstream's idle timer: it closes connections idle for IDLE_CLOSE, and a
# request that arrives on a connection idle for DROP_AFTER or more is dropped
# unanswered (the timer fired while the request was on the wire; widened to
# a window so the race is hit on every write, not by luck). The agent writes
# GAP after the previous answer, inside that window.
IDLE_CLOSE = 2.0
DROP_AFTER = 0.8
GAP = 0.85


class _Handler(BaseHTTPRequestHandler):
    """Keep-alive HTTP/1.1 with the idle timer described above."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.answered_at = None

    def handle_one_request(self):
        owner = self.server.owner
        self.connection.settimeout(IDLE_CLOSE)
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except (socket.timeout, OSError):
            self.close_connection = True
            return
        if not self.raw_requestline:
            self.close_connection = True
            return
        if self.answered_at is not None and time.monotonic() - self.answered_at >= DROP_AFTER:
            owner.note_drop()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.connection.settimeout(10)
        if not self.parse_request():
            return
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        key = self.headers.get("Idempotency-Key")
        payload = owner.apply(self.path, key, body)
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if owner.announce:
            self.send_header("Keep-Alive", owner.announce)
        # The idle timer starts before the answer leaves: however late this
        # thread runs after the write, the agent's next write (GAP after it
        # got the answer) finds the connection idle for at least GAP.
        self.answered_at = time.monotonic()
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        if owner.linger:
            # A lingering close right after the answer: this side's FIN,
            # then whatever comes in is read and dropped, never answered,
            # until the proxy closes its end. No reset ever comes back.
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(30)
            try:
                while self.connection.recv(65536):
                    owner.note_drop()
            except OSError:
                pass


class ClosingUpstream(ServerThread):
    def __init__(self, announce=None, honours_keys=True, linger=False):
        self.announce = announce  # a Keep-Alive header value, or None
        self.honours_keys = honours_keys
        self.linger = linger  # half-close each connection right after its first answer
        self.lock = threading.Lock()
        self.effects = []
        self.by_key = {}
        self.drops = 0
        super().__init__(_Handler)

    def note_drop(self):
        with self.lock:
            self.drops += 1

    def apply(self, path, key, body):
        with self.lock:
            if self.honours_keys and key in self.by_key:
                return self.by_key[key]
            effect = {"id": "fx_%d" % (len(self.effects) + 1), "key": key, "path": path}
            self.effects.append(effect)
            if key:
                self.by_key[key] = effect
            return effect


TOOLS = """\
tools:
  - name: pay.charge
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/charges }}
    effect: money
    idempotency: {{ header: Idempotency-Key, mode: inject }}
    reconcile: {{ mode: same_key }}
    receipt: /id
  - name: notes.add
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/notes }}
    effect: write
    idempotency: {{ header: Idempotency-Key, mode: inject, honoured: false }}
    reconcile: {{ mode: none }}
    receipt: /id
"""


def config(port, ledger):
    # One network thread: one upstream pool, so every write could reuse.
    return ("listen: 127.0.0.1:0\nthreads: 1\n"
            "ledger: {{ url: \"{ledger}\" }}\n"
            "egress: {{ allow_hosts: [\"*\"], allow_loopback: true, allow_private: true }}\n"
            "timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 5s, idle: 30s, drain: 5s }}\n"
            ).format(ledger=ledger) + TOOLS.format(port=port)


class StaleCases:
    BACKEND = "sqlite"

    def start(self, upstream):
        proxy = Proxy("")
        with open(proxy.config_path, "w") as f:
            f.write(config(upstream.port, ledger_url(self.BACKEND, proxy.dir)))
        proxy.start()
        self.addCleanup(proxy.stop)
        return proxy

    def writes_at_the_idle_timeout(self, upstream, path="/v1/charges", n=4):
        proxy = self.start(upstream)
        run = new_run()
        answers = []
        for i in range(n):
            if answers:
                time.sleep(GAP)  # the stimulus: the next write arrives as the upstream's idle timer fires
            answers.append(call(proxy, "POST", upstream.url(path), {"amount": 10, "currency": "eur", "n": i},
                                run=run))
        return proxy, answers

    def check_one_effect_each(self, upstream, answers):
        unknown = [a.json().get("reason_code") for a in answers if a.status != 200]
        self.assertEqual(unknown, [], "writes that did not come back 200")
        keys = [a.header("Idemgate-Key") for a in answers]
        self.assertEqual(len(set(keys)), len(answers))
        with upstream.lock:
            per_key = {k: sum(1 for e in upstream.effects if e["key"] == k) for k in keys}
        self.assertEqual(per_key, {k: 1 for k in keys})

    def test_no_keep_alive_announced_writes_go_out_fresh(self):
        with ClosingUpstream() as upstream:
            _, answers = self.writes_at_the_idle_timeout(upstream)
            self.check_one_effect_each(upstream, answers)
            self.assertEqual(upstream.drops, 0, "a write went out on a connection the upstream was closing")

    def test_keep_alive_timeout_too_close_writes_go_out_fresh(self):
        with ClosingUpstream(announce="timeout=1, max=100") as upstream:
            _, answers = self.writes_at_the_idle_timeout(upstream)
            self.check_one_effect_each(upstream, answers)
            self.assertEqual(upstream.drops, 0)

    def test_upstream_closing_early_is_resent_when_the_key_is_honoured(self):
        # It announces 30 s but closes after one: the pooled connection is
        # trusted, fails before any byte of the answer, and the write is sent
        # again on a fresh connection under the same key.
        with ClosingUpstream(announce="timeout=30") as upstream:
            _, answers = self.writes_at_the_idle_timeout(upstream, n=3)
            self.check_one_effect_each(upstream, answers)
            self.assertEqual(upstream.drops, 2, "each write after the first met a stale connection")

    def test_upstream_closing_early_stays_unknown_without_an_honoured_key(self):
        with ClosingUpstream(announce="timeout=30", honours_keys=False) as upstream:
            _, answers = self.writes_at_the_idle_timeout(upstream, path="/v1/notes", n=2)
            self.assertEqual(answers[0].status, 200, answers[0].body)
            self.assertEqual(answers[1].json().get("reason_code"), "tool_outcome_unknown", answers[1].body)
            self.assertEqual(upstream.drops, 1)
            self.assertEqual(len(upstream.effects), 1)

    def test_upstream_half_closing_right_after_its_answer_is_resent_at_once(self):
        # It announces 30 s but half-closes the connection right after
        # answering and lingers, reading and dropping. The FIN reaches the
        # proxy while the connection waits in the pool; the next write,
        # within the second in which the pool reuses a connection unchecked,
        # goes out on it, is dropped, and nothing more ever comes back on it.
        # The proxy must find the end of the stream the FIN left there and
        # send the write again on a fresh connection under the same key, at
        # once: not wait for an answer until timeouts.upstream_response and
        # call the write unknown.
        with ClosingUpstream(announce="timeout=30", linger=True) as upstream:
            proxy = self.start(upstream)
            run = new_run()
            answers = [call(proxy, "POST", upstream.url("/v1/charges"), {"amount": 10, "currency": "eur", "n": 0},
                            run=run)]
            pooled = time.monotonic()
            wait_until(lambda: proxy_side_has_fin(upstream.port), what="the upstream's FIN at the proxy")
            if time.monotonic() - pooled > 0.8:
                self.skipTest("the FIN took too long: the pool would check the connection itself")
            started = time.monotonic()
            answers.append(call(proxy, "POST", upstream.url("/v1/charges"), {"amount": 10, "currency": "eur", "n": 1},
                                run=run))
            elapsed = time.monotonic() - started
            self.check_one_effect_each(upstream, answers)
            # timeouts.upstream_response is 5 s: waiting it out and then
            # reconciling the unknown under the same key would also end in
            # one effect and a 200, seconds later.
            self.assertLess(elapsed, 3.0, "the write waited for timeouts.upstream_response")
            wait_until(lambda: upstream.drops >= 1, what="the lingering upstream reading the write it dropped")


class SqliteStale(StaleCases, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresStale(StaleCases, unittest.TestCase):
    BACKEND = "postgresql"


if __name__ == "__main__":
    unittest.main(verbosity=2)
