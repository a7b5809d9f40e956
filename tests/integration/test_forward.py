"""The pass-through proxy with real clients (curl, python http.client and
urllib) against a real recording upstream."""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from admin_common import TOKEN, AdminProxy  # noqa: E402
from harness import BASE_CONFIG, Proxy, proxy_side_has_fin, read_head, wait_until  # noqa: E402
from upstream import EchoServer, PiecemealUpstream, Upstream, serve_connections  # noqa: E402


def raw_exchange(port, data, timeout=10):
    """Sends raw bytes to the proxy and returns everything it answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                part = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not part:
                break
            chunks.append(part)
        return b"".join(chunks)


def parse_problem(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower().decode()] = v.strip().decode()
    return status, headers, json.loads(body) if body else None


def get_on(sock, conn, url):
    """One GET on an open keep-alive connection (conn = sock.makefile("rb")); its status line."""
    sock.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % url.encode())
    status = conn.readline()
    length = 0
    while True:
        line = conn.readline()
        if line in (b"\r\n", b""):
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    conn.read(length)
    return status


class ForwardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.upstream = Upstream().__enter__()
        cls.proxy = Proxy(BASE_CONFIG).start()

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        cls.upstream.__exit__(None, None, None)

    def setUp(self):
        self.seen_before = len(self.upstream.requests)

    def new_requests(self):
        return self.upstream.requests[self.seen_before:]

    def curl(self, *args):
        out = subprocess.run(["curl", "-sS", "-x", self.proxy.proxy_url(), *args],
                             capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        return out.stdout

    def test_curl_get_and_post(self):
        got = json.loads(self.curl(self.upstream.url("/echo?a=1")))
        self.assertEqual(got["method"], "GET")
        self.assertEqual(got["path"], "/echo?a=1")  # origin-form upstream
        got = json.loads(self.curl("-d", "hello=world", self.upstream.url("/echo")))
        self.assertEqual(got["method"], "POST")
        self.assertEqual(got["body_len"], len("hello=world"))
        rec = self.new_requests()[-1]
        self.assertEqual(rec.body, b"hello=world")
        self.assertEqual(rec.header("Host"), "127.0.0.1:%d" % self.upstream.port)
        self.assertIn("idemgate", rec.header("Via"))

    def test_python_urllib_through_proxy_handler(self):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": self.proxy.proxy_url()}))
        with opener.open(self.upstream.url("/echo"), data=b'{"x": 1}', timeout=10) as r:
            self.assertEqual(r.status, 200)
            got = json.loads(r.read())
        self.assertEqual(got["body_len"], 8)
        with self.assertRaises(urllib.error.HTTPError) as cm:
            opener.open(self.upstream.url("/status?code=404"), timeout=10)
        self.assertEqual(cm.exception.code, 404)

    def test_chunked_upload_and_download(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.proxy.port, timeout=30)
        parts = [b"a" * 1000, b"b" * 70000, b"c" * 5]
        conn.request("POST", self.upstream.url("/sink"), body=iter(parts), encode_chunked=True)
        r = conn.getresponse()
        got = json.loads(r.read())
        self.assertEqual(got["body_len"], 71005)
        rec = self.new_requests()[-1]
        self.assertEqual(rec.header("Transfer-Encoding"), "chunked")
        conn.request("GET", self.upstream.url("/bytes?n=300000&chunked=1"))
        r = conn.getresponse()
        self.assertEqual(r.getheader("Transfer-Encoding"), "chunked")
        self.assertEqual(len(r.read()), 300000)
        conn.close()

    def test_keep_alive_reuses_one_upstream_connection(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.proxy.port, timeout=10)
        for i in range(10):
            conn.request("GET", self.upstream.url("/echo?i=%d" % i))
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            r.read()
        conn.close()
        ids = {rec.conn_id for rec in self.new_requests()}
        self.assertEqual(len(self.new_requests()), 10)
        # Seen once in a loaded ctest run (2 connections) and not again in 32
        # runs of this class: the proxy's lines (upstream_reused, each
        # request's connection) say which request changed connection.
        self.assertEqual(len(ids), 1, "upstream saw %d connections for 10 sequential requests %s; the proxy's "
                         "last lines:\n%s" % (len(ids), [rec.conn_id for rec in self.new_requests()],
                                               "\n".join(self.proxy.stderr().splitlines()[-14:])))

    def test_hop_by_hop_headers_never_reach_upstream(self):
        req = ("GET %s HTTP/1.1\r\nHost: x\r\n"
               "Proxy-Authorization: Basic cnVuLTQyOnNlY3JldA==\r\n"
               "Connection: close, X-Hop-Secret\r\nX-Hop-Secret: s3cr3t\r\n"
               "Keep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Connection: keep-alive\r\n"
               "Upgrade: websocket\r\nIdemgate-Run: run-7\r\nX-Kept: yes\r\n\r\n") % self.upstream.url("/echo")
        raw = raw_exchange(self.proxy.port, req.encode())
        self.assertTrue(raw.startswith(b"HTTP/1.1 200"), raw[:200])
        rec = self.new_requests()[-1]
        for name in ("Proxy-Authorization", "X-Hop-Secret", "Keep-Alive", "TE", "Proxy-Connection",
                     "Upgrade", "Idemgate-Run"):
            self.assertFalse(rec.has_header(name), name + " reached the upstream")
        self.assertEqual(rec.header("X-Kept"), "yes")
        self.assertNotIn(b"s3cr3t", raw)

    def test_upstream_sees_one_host_the_target_names(self):
        url = self.upstream.url("/echo")
        authority = "127.0.0.1:%d" % self.upstream.port
        for hosts in ([authority], [authority, "evil.example"], ["evil.example", authority], ["x"], []):
            with self.subTest(hosts=hosts):
                head = "GET %s HTTP/1.1\r\n" % url + "".join("Host: %s\r\n" % h for h in hosts)
                raw = raw_exchange(self.proxy.port, (head + "Connection: close\r\n\r\n").encode())
                if len(hosts) == 1:
                    self.assertTrue(raw.startswith(b"HTTP/1.1 200"), raw[:200])
                else:
                    # RFC 9112 3.2: none, or more than one, is refused; never forwarded as sent.
                    self.assertTrue(raw.startswith(b"HTTP/1.1 400") or raw.startswith(b"HTTP/1.1 200"), raw[:200])
                if raw.startswith(b"HTTP/1.1 200"):
                    rec = self.new_requests()[-1]
                    self.assertEqual([v for k, v in rec.headers if k.lower() == "host"], [authority])

    def test_answer_connection_header_follows_the_client(self):
        url = self.upstream.url("/echo").encode()

        def head_of(request):
            raw = raw_exchange(self.proxy.port, request)
            head = raw.partition(b"\r\n\r\n")[0].lower()
            return head.split(b"\r\n")
        # HTTP/1.0 asking to keep the connection: told it is kept.
        lines = head_of(b"GET " + url + b" HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        self.assertTrue(lines[0].startswith(b"http/1.0 200"), lines)
        self.assertIn(b"connection: keep-alive", lines)
        # HTTP/1.0 without it: closed, and no keep-alive promised.
        lines = head_of(b"GET " + url + b" HTTP/1.0\r\n\r\n")
        self.assertNotIn(b"connection: keep-alive", lines)
        # HTTP/1.1 closing: told so.
        lines = head_of(b"GET " + url + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertIn(b"connection: close", lines)
        # HTTP/1.1 kept alive: no Connection header at all (the upstream's is hop-by-hop).
        sock = socket.create_connection(("127.0.0.1", self.proxy.port), timeout=10)
        try:
            sock.sendall(b"GET " + url + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            conn = sock.makefile("rb")
            status = conn.readline()
            self.assertTrue(status.startswith(b"HTTP/1.1 200"), status)
            names = []
            while True:
                line = conn.readline()
                if line in (b"\r\n", b""):
                    break
                names.append(line.split(b":")[0].strip().lower())
            self.assertNotIn(b"connection", names)
        finally:
            sock.close()

    def test_connection_refused_is_502_problem(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
        s.close()
        raw = raw_exchange(self.proxy.port,
                           b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: x\r\n\r\n" % closed_port)
        status, headers, problem = parse_problem(raw)
        self.assertEqual(status, 502)
        self.assertEqual(headers["content-type"], "application/problem+json")
        self.assertEqual(problem["reason_code"], "upstream_connect_failed")
        self.assertEqual(problem["status"], 502)

    def test_malformed_request_line_is_400(self):
        raw = raw_exchange(self.proxy.port, b"THIS IS NOT HTTP\r\n\r\n")
        status, headers, problem = parse_problem(raw)
        self.assertEqual(status, 400)
        self.assertEqual(problem["reason_code"], "malformed_request")
        raw = raw_exchange(self.proxy.port, b"GET /relative HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, problem = parse_problem(raw)
        self.assertEqual(status, 400)
        self.assertEqual(problem["reason_code"], "not_a_proxy_request")
        self.assertEqual(self.new_requests(), [])

    def test_smuggling_attempts_are_400_and_never_forwarded(self):
        url = self.upstream.url("/echo").encode()
        attempts = {
            "cl+te": b"POST " + url + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "te+cl": b"POST " + url + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     b"Content-Length: 5\r\n\r\n0\r\n\r\n",
            "two content-lengths": b"POST " + url + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                                   b"Content-Length: 6\r\n\r\nhello!",
            "obs-fold": b"GET " + url + b" HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n",
            "te gzip": b"POST " + url + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            "te not chunked + cl": b"POST " + url + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n"
                                   b"Content-Length: 5\r\n\r\nhello",
            "bare lf": b"GET " + url + b" HTTP/1.1\nHost: x\n\n",
            # RFC 9110 9.3.8: a TRACE carries no content (or its bytes would be read as the next request).
            "trace with content": b"TRACE " + url + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
            "trace chunked": b"TRACE " + url + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        }
        for name, data in attempts.items():
            with self.subTest(name):
                raw = raw_exchange(self.proxy.port, data)
                status, headers, problem = parse_problem(raw)
                self.assertEqual(status, 400, raw)
                self.assertEqual(headers["content-type"], "application/problem+json")
        self.assertEqual(self.new_requests(), [], "a smuggling attempt reached the upstream")

    def test_header_limits(self):
        big = b"GET " + self.upstream.url("/echo").encode() + b" HTTP/1.1\r\nHost: x\r\nX-Big: " + \
              b"a" * (70 * 1024) + b"\r\n\r\n"
        status, _, problem = parse_problem(raw_exchange(self.proxy.port, big))
        self.assertEqual(status, 431)
        self.assertEqual(problem["reason_code"], "header_too_large")
        long_line = b"GET " + self.upstream.url("/echo?q=" + "a" * 9000).encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n"
        status, _, problem = parse_problem(raw_exchange(self.proxy.port, long_line))
        self.assertEqual(status, 414)
        self.assertEqual(self.new_requests(), [])

    def test_expect_100_continue_with_curl(self):
        body = os.path.join(self.proxy.dir, "body.bin")
        with open(body, "wb") as f:
            f.write(b"z" * (2 * 1024 * 1024))
        got = json.loads(self.curl("-H", "Expect: 100-continue", "--data-binary", "@" + body,
                                   self.upstream.url("/sink")))
        self.assertEqual(got["body_len"], 2 * 1024 * 1024)
        self.assertFalse(self.new_requests()[-1].has_header("Expect"))

    def test_head_request(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.proxy.port, timeout=10)
        conn.request("HEAD", self.upstream.url("/echo"))
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.read(), b"")
        conn.request("GET", self.upstream.url("/echo"))  # the connection is still in sync
        self.assertEqual(conn.getresponse().status, 200)
        conn.close()

    def test_connect_tunnel_carries_bytes(self):
        with EchoServer() as echo:
            with socket.create_connection(("127.0.0.1", self.proxy.port), timeout=10) as s:
                s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (echo.port, echo.port))
                head = b""
                while b"\r\n\r\n" not in head:
                    head += s.recv(1)
                self.assertTrue(head.startswith(b"HTTP/1.1 200"), head)
                payload = os.urandom(200000)
                threading.Thread(target=s.sendall, args=(payload,), daemon=True).start()
                got = b""
                while len(got) < len(payload):
                    part = s.recv(65536)
                    self.assertTrue(part, "tunnel closed early")
                    got += part
                self.assertEqual(got, payload)


class PiecemealAnswerTest(unittest.TestCase):
    """An answer header that arrives in pieces (a slow upstream, a big
    header, a TLS record each line) is read whole, wherever it is cut."""

    ANSWER = (b"HTTP/1.1 200 OK\r\nX-A: 1\r\nX-Long: " + b"v" * 300 + b"\r\nContent-Length: 5\r\n"
              b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\nhello")

    @classmethod
    def setUpClass(cls):
        cls.upstream = PiecemealUpstream()
        cls.proxy = Proxy(BASE_CONFIG).start()

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        cls.upstream.close()

    def exchange_on(self, sock, conn):
        sock.sendall(b"GET http://127.0.0.1:%d/x HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n"
                     % (self.upstream.port, self.upstream.port))
        status = conn.readline()
        headers = []
        while True:
            line = conn.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            headers.append((name.strip().lower(), value.strip()))
        length = int(dict(headers).get(b"content-length", b"0"))
        return status, headers, conn.read(length)

    def check_cut(self, pieces):
        self.upstream.pieces = pieces
        sock = socket.create_connection(("127.0.0.1", self.proxy.port), timeout=10)
        try:
            conn = sock.makefile("rb")
            for _ in range(2):  # twice on one connection: the pooled upstream's buffer starts clean
                status, headers, body = self.exchange_on(sock, conn)
                self.assertTrue(status.startswith(b"HTTP/1.1 200"), (status, pieces))
                self.assertEqual(body, b"hello")
                values = dict(headers)
                self.assertEqual(values[b"x-a"], b"1")
                self.assertEqual(values[b"x-long"], b"v" * 300)
                self.assertEqual([v for k, v in headers if k == b"set-cookie"], [b"a=1", b"b=2"])
        finally:
            sock.close()

    def test_header_cut_anywhere(self):
        answer = self.ANSWER
        header_end = answer.index(b"\r\n\r\n")
        for cut in (5, answer.index(b"\r\n") + 2, answer.index(b"X-Long") + 20, header_end, header_end + 2,
                    header_end + 4):
            with self.subTest(cut=cut):
                self.check_cut([answer[:cut], answer[cut:]])
        # Line by line.
        lines = [line + b"\r\n" for line in answer[:header_end].split(b"\r\n")]
        self.check_cut(lines + [b"\r\nhello"])

    def test_head_answer_gets_no_body_even_when_the_upstream_sends_one(self):
        """An upstream that sends a body after its answer to a HEAD (it must
        not): the client gets the header alone, with the upstream's length,
        and its next exchange on the connection is framed right."""
        self.upstream.pieces = [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"]
        sock = socket.create_connection(("127.0.0.1", self.proxy.port), timeout=10)
        try:
            conn = sock.makefile("rb")
            sock.sendall(b"HEAD http://127.0.0.1:%d/x HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n"
                         % (self.upstream.port, self.upstream.port))
            status = conn.readline()
            self.assertTrue(status.startswith(b"HTTP/1.1 200"), status)
            length = None
            while True:
                line = conn.readline()
                if line in (b"\r\n", b""):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = line.split(b":")[1].strip()
            self.assertEqual(length, b"5")
            self.upstream.pieces = [self.ANSWER]
            status, headers, body = self.exchange_on(sock, conn)
            self.assertTrue(status.startswith(b"HTTP/1.1 200"), status)
            self.assertEqual(body, b"hello")
        finally:
            sock.close()

    def test_interim_answer_then_a_cut_header(self):
        interim = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
        cut = self.ANSWER.index(b"X-A") + 2
        self.check_cut([interim + self.ANSWER[:cut], self.ANSWER[cut:]])
        self.check_cut([interim[:10], interim[10:] + self.ANSWER[:cut], self.ANSWER[cut:]])


class ClosedWhilePooledTest(unittest.TestCase):
    """An upstream that ends a keep-alive connection right after answering,
    without saying so: the proxy pools the connection, and the next request
    reuses it within the second in which the pool does not check it. The
    request goes out on it and finds the end of the stream: it is sent again
    on a fresh connection at once, not after timeouts.upstream_response.
    Both ways an upstream ends it: a full close (the request written on it
    is answered with a reset), and a half-close that keeps reading and
    discarding, as a lingering close does (nothing more ever comes back: the
    FIN that came while the connection idled is all there is to see, so the
    proxy must look for it after writing, not wait for more)."""

    def setUp(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.answered = 0
        self.lingering = False
        self.dropped = 0  # requests a lingering connection read and never answered
        self.lock = threading.Lock()
        threading.Thread(target=serve_connections, args=(self.listener, self._answer_once), daemon=True).start()

    def tearDown(self):
        self.listener.close()

    def _answer_once(self, conn):
        with self.lock:
            self.connections += 1
        with conn:
            if b"\r\n\r\n" not in read_head(conn):
                return
            with self.lock:
                self.answered += 1
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=60\r\n\r\nok")
            if self.lingering:
                conn.shutdown(socket.SHUT_WR)
                conn.settimeout(60)
                try:
                    while conn.recv(65536):  # read and dropped, never answered
                        with self.lock:
                            self.dropped += 1
                except OSError:
                    pass
        # closed: a FIN (after the lingering, none more)

    def check_sent_again_at_once(self):
        cfg = BASE_CONFIG.replace("upstream_response: 2s", "upstream_response: 30s")
        with Proxy(cfg) as proxy:
            sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=60)
            try:
                conn = sock.makefile("rb")
                url = "http://127.0.0.1:%d/x" % self.port
                self.assertTrue(get_on(sock, conn, url).startswith(b"HTTP/1.1 200"))
                pooled = time.monotonic()
                wait_until(lambda: proxy_side_has_fin(self.port), what="the upstream's FIN at the proxy")
                started = time.monotonic()
                if started - pooled > 0.8:
                    self.skipTest("the FIN took %.2f s: the pool would check the connection itself" %
                                  (started - pooled))
                status = get_on(sock, conn, url)
                elapsed = time.monotonic() - started
            finally:
                sock.close()
        self.assertTrue(status.startswith(b"HTTP/1.1 200"), status)
        self.assertLess(elapsed, 10.0, "waited for timeouts.upstream_response instead of seeing the end of the stream")
        # Two connections: the second request went out on the pooled one first.
        self.assertEqual((self.connections, self.answered), (2, 2))

    def test_closed(self):
        self.check_sent_again_at_once()

    def test_half_closed_and_lingering(self):
        self.lingering = True
        self.check_sent_again_at_once()
        # The second request did go out on the half-closed connection first.
        wait_until(lambda: self.dropped >= 1, what="the lingering upstream reading the request")


class DeadlineTest(unittest.TestCase):
    def test_slow_upstream_is_504_problem(self):
        cfg = BASE_CONFIG.replace("upstream_response: 2s", "upstream_response: 300ms")
        with Upstream() as up, Proxy(cfg) as proxy:
            raw = raw_exchange(proxy.port, b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % up.url("/slow?ms=3000").encode())
            status, headers, problem = parse_problem(raw)
            self.assertEqual(status, 504)
            self.assertEqual(headers["content-type"], "application/problem+json")
            self.assertEqual(problem["reason_code"], "upstream_timeout")

    def test_idle_keep_alive_connection_closes_after_timeouts_idle(self):
        cfg = BASE_CONFIG.replace("idle: 10s", "idle: 1s")
        self.assertNotEqual(cfg, BASE_CONFIG)
        with Upstream() as up, Proxy(cfg) as proxy:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as s:
                conn = s.makefile("rb")
                for _ in range(2):  # keep-alive works, and each answer moves the deadline on
                    self.assertTrue(get_on(s, conn, up.url("/echo")).startswith(b"HTTP/1.1 200"))
                answered = time.monotonic()
                self.assertEqual(conn.read(1), b"", "the proxy closes the idle connection")
                self.assertGreaterEqual(time.monotonic() - answered, 0.9, "not before timeouts.idle")

    def test_request_header_not_finished_within_client_header_is_dropped(self):
        cfg = BASE_CONFIG.replace("client_header: 5s", "client_header: 300ms")
        self.assertNotEqual(cfg, BASE_CONFIG)
        with Upstream() as up, Proxy(cfg) as proxy:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as s:
                s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n" % up.url("/echo").encode())  # no end of header
                started = time.monotonic()
                self.assertEqual(s.recv(65536), b"", "the proxy drops a header that never ends")
                self.assertGreaterEqual(time.monotonic() - started, 0.25)
            self.assertEqual(len(up.requests), 0)

    def test_request_log_line(self):
        with Upstream() as up, Proxy(BASE_CONFIG) as proxy:
            raw_exchange(proxy.port, b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
                         % up.url("/echo?token=s3cret").encode())
            line = wait_until(lambda: [l for l in proxy.log_lines() if l.get("event") == "request"],
                              what="a request log line")[0]
            self.assertEqual(line["method"], "POST")
            self.assertEqual(line["host"], "127.0.0.1")
            self.assertEqual(line["status"], 200)
            self.assertEqual(line["bytes_in"], 3)
            self.assertGreater(line["bytes_out"], 0)
            self.assertIn("duration_ms", line)
            # The path, never the query (it can carry secrets).
            self.assertEqual(line["path"], "/echo")
            self.assertNotIn("s3cret", json.dumps(line))


class IdleBufferTest(unittest.TestCase):
    """A connection that has carried two requests waits for the next one
    holding its read buffer; after a second of quiet it gives the buffer back
    (idemgate_connections_idle_buffered) and still serves what comes next."""

    def start(self, idle="10s"):
        self.up = Upstream().__enter__()
        self.addCleanup(self.up.__exit__, None, None, None)
        directory = tempfile.mkdtemp(prefix="idemgate-idle-")
        self.addCleanup(shutil.rmtree, directory, True)
        with open(os.path.join(directory, "admin.token"), "w") as f:
            f.write(TOKEN + "\n")
        cfg = BASE_CONFIG.replace("idle: 10s", "idle: " + idle)
        cfg += "admin:\n  listen: 127.0.0.1:0\n  token_file: %s\n" % os.path.join(directory, "admin.token")
        self.proxy = AdminProxy(cfg, directory).start()
        self.addCleanup(self.proxy.stop)

    def buffered(self):
        text = self.proxy.admin("GET", "/metrics").body.decode()
        return int([line for line in text.splitlines()
                    if line.startswith("idemgate_connections_idle_buffered ")][0].split()[1])

    def get(self, s, conn):
        self.assertTrue(get_on(s, conn, self.up.url("/echo")).startswith(b"HTTP/1.1 200"))

    def test_buffer_held_while_in_use_and_given_back_after_quiet(self):
        self.start()
        with socket.create_connection(("127.0.0.1", self.proxy.port), timeout=20) as s:
            conn = s.makefile("rb")
            self.get(s, conn)
            self.assertEqual(self.buffered(), 0, "after one request the wait holds no buffer")
            self.get(s, conn)
            wait_until(lambda: self.buffered() == 1, 10, "a connection in use to wait with its buffer")
            self.get(s, conn)  # read by that wait, straight into the buffer
            held = time.monotonic()
            wait_until(lambda: self.buffered() == 1, 10, "the next wait with its buffer")
            wait_until(lambda: self.buffered() == 0, 10, "the sweep to take the buffer back")
            self.assertGreaterEqual(time.monotonic() - held, 0.9, "not before a second of quiet")
            # The wait goes on without the buffer, and the connection still serves.
            self.get(s, conn)
            wait_until(lambda: self.buffered() == 1, 10, "the buffer held again once in use")
        wait_until(lambda: self.buffered() == 0, 10, "the closed connection to leave the gauge")
        self.assertEqual(len(self.up.requests), 4)

    def test_idle_timeout_holds_after_the_buffer_is_given_back(self):
        self.start(idle="3s")
        with socket.create_connection(("127.0.0.1", self.proxy.port), timeout=20) as s:
            conn = s.makefile("rb")
            self.get(s, conn)
            self.get(s, conn)
            answered = time.monotonic()
            wait_until(lambda: self.buffered() == 1, 10, "the wait with its buffer")
            wait_until(lambda: self.buffered() == 0, 10, "the sweep to take the buffer back")
            self.assertEqual(conn.read(1), b"", "the proxy closes the idle connection")
            self.assertGreaterEqual(time.monotonic() - answered, 2.9, "at timeouts.idle, not before")

    def test_drain_closes_a_connection_waiting_with_its_buffer(self):
        self.start()
        with socket.create_connection(("127.0.0.1", self.proxy.port), timeout=20) as s:
            conn = s.makefile("rb")
            for _ in range(2):
                self.get(s, conn)
            wait_until(lambda: self.buffered() == 1, 10, "the wait with its buffer")
            self.proxy.proc.send_signal(signal.SIGTERM)
            s.settimeout(5)  # well inside timeouts.drain (10s): closed by the drain, not its grace timeout
            self.assertEqual(conn.read(1), b"", "drain closes the idle connection")
            self.assertEqual(self.proxy.proc.wait(20), 0)
        events = [line["event"] for line in self.proxy.log_lines()]
        self.assertIn("stopped", events)
        self.assertNotIn("drain_timeout", events)


class DrainTest(unittest.TestCase):
    def test_sigterm_lets_in_flight_request_finish(self):
        with Upstream() as up:
            proxy = Proxy(BASE_CONFIG).start()
            result = {}

            def slow_call():
                conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=20)
                conn.request("GET", up.url("/slow?ms=800"))
                r = conn.getresponse()
                result["status"] = r.status
                result["body"] = r.read()

            t = threading.Thread(target=slow_call)
            t.start()
            up.wait_slow_started()
            proxy.proc.send_signal(signal.SIGTERM)
            t.join(20)
            self.assertEqual(result.get("status"), 200)
            self.assertEqual(proxy.proc.wait(20), 0)
            proxy.stop()
            events = [l["event"] for l in proxy.log_lines()]
            self.assertIn("draining", events)
            self.assertIn("stopped", events)


if __name__ == "__main__":
    unittest.main(verbosity=2)
