"""Pooled upstream connections do not outlive timeouts.idle: once an
upstream gets no more traffic, idemgate closes the connections it kept for
it within about twice the idle time (it does not wait for another request
to that upstream, which may never come). Real TCP on loopback: the upstream
counts the connections open to it."""
import http.client
import os
import sys
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.dirname(__file__))
from harness import BASE_CONFIG, Proxy, wait_until  # noqa: E402
from upstream import ServerThread  # noqa: E402


class _Counting(BaseHTTPRequestHandler):
    """Keep-alive HTTP/1.1 that never closes an idle connection itself and
    counts the connections open to it."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.server.owner.opened()

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.owner.closed()

    def do_GET(self):
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class CountingUpstream(ServerThread):
    def __init__(self):
        super().__init__(_Counting)
        self._lock = threading.Lock()
        self.open = 0
        self.ever = 0

    def opened(self):
        with self._lock:
            self.open += 1
            self.ever += 1

    def closed(self):
        with self._lock:
            self.open -= 1


def get_through(proxy_port, url):
    c = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=10)
    try:
        c.request("GET", url, headers={"Connection": "close"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class UpstreamPoolTest(unittest.TestCase):
    def test_idle_pooled_connections_close_without_more_traffic(self):
        idle = 1.0
        cfg = BASE_CONFIG.replace("threads: 2", "threads: 1").replace("idle: 10s", "idle: 1s")
        with CountingUpstream() as up, Proxy(cfg) as p:
            started = time.monotonic()
            self.assertEqual(get_through(p.port, up.url("/a")), (200, b"ok"))
            # The second request reuses the pooled connection: it was kept.
            self.assertEqual(get_through(p.port, up.url("/b")), (200, b"ok"))
            self.assertEqual(up.ever, 1)
            wait_until(lambda: up.open == 0, timeout=10, what="the pooled upstream connection to close")
            closed_after = time.monotonic() - started
            # Kept until it was idle for timeouts.idle (the sweep closes it
            # within about twice that; the wait above bounds it).
            self.assertGreaterEqual(closed_after, idle * 0.9)
            # The proxy still serves that upstream afterwards, on a new one.
            self.assertEqual(get_through(p.port, up.url("/c")), (200, b"ok"))
            self.assertEqual(up.ever, 2)


if __name__ == "__main__":
    unittest.main()
