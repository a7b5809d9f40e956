"""An upstream that writes its answer's header and its body apart, with
Nagle's algorithm on (no TCP_NODELAY: Python's http.server, many small
services), holds the body until the header is acknowledged. On a
keep-alive connection that has carried a request the kernel delays that
ACK by 40 ms or more, so every answer after the first would wait that long
behind the proxy. idemgate acknowledges at once whatever part of an answer
has arrived when the rest is still missing (TCP_QUICKACK), on the
pass-through path and the guarded one, whether the cut falls after the
header or inside it.

No timing target here (speed is measured by bench/): each request is
checked against the delayed ACK's floor, 40 ms, which a request that waits
for it cannot beat; a few slow requests on a loaded machine are allowed,
every request waiting (what happens without the quick ACK) is not."""
import http.client
import json
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BASE_CONFIG, Proxy  # noqa: E402
from enforce_common import ledger_url, make_config, new_run, ops  # noqa: E402

DELAYED_ACK_FLOOR_S = 0.040  # Linux's TCP_DELACK_MIN
REQUESTS = 20
ALLOWED_SLOW = REQUESTS // 2  # without the quick ACK all but the first wait


class SplitUpstream:
    """A real HTTP/1.1 upstream on loopback: each answer's header in one
    send(), then its JSON body in another, Nagle on; connections kept alive
    (Keep-Alive: timeout=30, so that guarded writes may reuse them). Records
    every request it applied: (connection number, method, path, body)."""

    def __init__(self, header_in_two=False):
        self.header_in_two = header_in_two  # the header itself in two send()s, the body with its second
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.applied = []
        self.lock = threading.Lock()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.sock.close()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                number = self.connections
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn, number):
        reader = conn.makefile("rb")
        try:
            while True:
                line = reader.readline(65537)
                if not line:
                    return
                method, target, _ = line.decode().split(" ", 2)
                length = 0
                while True:
                    h = reader.readline(65537)
                    if h in (b"\r\n", b""):
                        break
                    name, _, value = h.decode().partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = reader.read(length) if length else b""
                with self.lock:
                    self.applied.append((number, method, target, body))
                    n = len(self.applied)
                payload = json.dumps({"id": "obj_%d" % n, "ok": True}).encode()
                head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Keep-Alive: timeout=30\r\nContent-Length: %d\r\n\r\n" % len(payload))
                if self.header_in_two:
                    conn.sendall(head[:20])
                    conn.sendall(head[20:] + payload)
                else:
                    conn.sendall(head)
                    conn.sendall(payload)
        except OSError:
            return
        finally:
            conn.close()


class SplitAnswers(unittest.TestCase):
    HEADER_IN_TWO = False

    def setUp(self):
        self.upstream = SplitUpstream(self.HEADER_IN_TWO)
        self.addCleanup(self.upstream.close)

    def timed(self, proxy, method, path, bodies, headers):
        """Sequential requests on one client keep-alive connection: their
        statuses and durations in seconds."""
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out = []
        try:
            for body in bodies:
                started = time.monotonic()
                conn.request(method, "http://127.0.0.1:%d%s" % (self.upstream.port, path), body=body,
                             headers=headers)
                r = conn.getresponse()
                r.read()
                out.append((r.status, time.monotonic() - started))
        finally:
            conn.close()
        return out

    def assert_not_held(self, answers):
        self.assertEqual([s for s, _ in answers], [200] * len(answers))
        # The first answer of a fresh connection is acknowledged at once by
        # the kernel anyway (its quick-ACK start): count the others.
        slow = [round(d * 1000, 1) for _, d in answers[1:] if d >= DELAYED_ACK_FLOOR_S]
        self.assertLessEqual(len(slow), ALLOWED_SLOW,
                             "answers held for the delayed ACK (ms): %s; all: %s"
                             % (slow, [round(d * 1000, 1) for _, d in answers]))
        # One upstream connection carried them all, so each answer after
        # the first came on a connection that had sent requests.
        self.assertEqual(self.upstream.connections, 1)

    def test_pass_through_answer_is_not_held_for_the_delayed_ack(self):
        with Proxy(BASE_CONFIG) as proxy:
            answers = self.timed(proxy, "GET", "/items", [None] * REQUESTS, {})
        self.assert_not_held(answers)
        self.assertEqual(len(self.upstream.applied), REQUESTS)

    def test_guarded_write_answer_is_not_held_for_the_delayed_ack(self):
        proxy = Proxy("")
        config = make_config(self.upstream.port, ledger_url("sqlite", proxy.dir))
        with open(proxy.config_path, "w") as f:
            f.write(config)
        proxy.start()
        self.addCleanup(proxy.stop)
        run = new_run()
        bodies = [json.dumps({"title": "ticket %d" % i}).encode() for i in range(REQUESTS)]
        answers = self.timed(proxy, "POST", "/v1/tickets", bodies,
                             {"Content-Type": "application/json", "Idemgate-Run": run})
        self.assert_not_held(answers)
        # Each write applied once, through the guard: an intent each, all
        # completed.
        self.assertEqual(sorted(b for _, _, _, b in self.upstream.applied), sorted(bodies))
        self.assertEqual(len(self.upstream.applied), REQUESTS)
        intents = ops(proxy, "intents", "show", "--run", run)
        self.assertEqual(len(intents), REQUESTS, intents)
        self.assertEqual({i["state"] for i in intents}, {"completed"}, intents)


class SplitHeaders(SplitAnswers):
    """The same with the answer's header itself cut in two (its second part
    held the same way): the proxy acknowledges a partial header too."""
    HEADER_IN_TWO = True


if __name__ == "__main__":
    unittest.main(verbosity=2)
