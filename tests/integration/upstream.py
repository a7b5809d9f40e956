"""A small real HTTP/1.1 upstream for integration tests.

It records every request it received (method, path, headers, body size and
digest, which TCP connection carried it) and every effect it applied, so a
test can count duplicates. Behaviour is chosen per path:

  /echo            200 JSON describing the request
  /sink            reads the body (any framing), answers its length and sha256
  /bytes?n=N[&chunked=1]  streams N bytes (Content-Length, or chunked)
  /slow?ms=N       waits N ms, then 200
  /status?code=C   answers status C (with optional &retry_after=S)
  /close           reads the request, closes without answering

Runs in a thread of the test process; tests wait on conditions, never sleep.
"""
import hashlib
import json
import socket
import socketserver
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

from harness import wait_until


class Recorded:
    def __init__(self, method, path, headers, body_len, body_sha, body, conn_id):
        self.method = method
        self.path = path
        self.headers = headers  # list of (name, value) as received
        self.body_len = body_len
        self.body_sha = body_sha
        self.body = body  # first 64 KiB
        self.conn_id = conn_id

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def has_header(self, name):
        return any(k.lower() == name.lower() for k, _ in self.headers)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.conn_id = self.server.owner._next_conn_id()

    def log_message(self, *args):
        pass

    def _read_body(self):
        te = self.headers.get("Transfer-Encoding")
        h = hashlib.sha256()
        total = 0
        keep = bytearray()
        if te and te.lower() == "chunked":
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                left = size
                while left:
                    part = self.rfile.read(min(left, 1 << 16))
                    if not part:
                        raise ConnectionError("short chunk")
                    h.update(part)
                    if len(keep) < 65536:
                        keep += part[: 65536 - len(keep)]
                    left -= len(part)
                    total += len(part)
                self.rfile.readline(3)
        else:
            left = int(self.headers.get("Content-Length") or 0)
            while left:
                part = self.rfile.read(min(left, 1 << 16))
                if not part:
                    raise ConnectionError("short body")
                h.update(part)
                if len(keep) < 65536:
                    keep += part[: 65536 - len(keep)]
                left -= len(part)
                total += len(part)
        return total, h.hexdigest(), bytes(keep)

    def _handle(self):
        body_len, body_sha, body = self._read_body()
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        rec = Recorded(self.command, self.path, list(self.headers.items()), body_len, body_sha, body, self.conn_id)
        self.server.owner._record(rec)
        route = url.path
        if route == "/close":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if route == "/slow":
            self.server.owner._slow_started.set()
            time.sleep(int(query.get("ms", "1000")) / 1000.0)  # the upstream itself is slow
        if route == "/bytes":
            n = int(query.get("n", "0"))
            chunked = query.get("chunked") == "1"
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(n))
            self.end_headers()
            block = b"x" * 65536
            left = n
            while left:
                part = block[: min(left, len(block))]
                if chunked:
                    self.wfile.write(b"%x\r\n" % len(part) + part + b"\r\n")
                else:
                    self.wfile.write(part)
                left -= len(part)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
            return
        status = 200
        extra = []
        if route == "/status":
            status = int(query.get("code", "200"))
            if "retry_after" in query:
                extra.append(("Retry-After", query["retry_after"]))
        payload = json.dumps({
            "method": self.command,
            "path": self.path,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body_len": body_len,
            "body_sha256": body_sha,
            "conn_id": self.conn_id,
        }).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog is 5: a test that opens dozens of
    # connections at once (test_guarded_memory's 32 held calls) overflowed
    # it, and each dropped SYN came back a second later, within idemgate's
    # upstream_connect of 2 s only while the machine was idle. Real servers
    # listen with hundreds (nginx: 511).
    request_queue_size = 128


class ServerThread:
    """A handler class served on 127.0.0.1:0 in a daemon thread; the handler
    reaches this object as self.server.owner. Use as a context manager."""

    def __init__(self, handler):
        self._server = _Server(("127.0.0.1", 0), handler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)


class Upstream(ServerThread):
    """Start with `with Upstream() as up:`; up.port, up.requests."""

    def __init__(self):
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.requests = []
        self._conn_ids = 0
        self._slow_started = threading.Event()
        super().__init__(_Handler)

    def _next_conn_id(self):
        with self._lock:
            self._conn_ids += 1
            return self._conn_ids

    def _record(self, rec):
        with self._cond:
            self.requests.append(rec)
            self._cond.notify_all()

    def wait_for_requests(self, n, timeout=10.0):
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.requests) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("upstream saw %d requests, expected %d" % (len(self.requests), n))
                self._cond.wait(left)
            return list(self.requests)

    def wait_slow_started(self, timeout=10.0):
        if not self._slow_started.wait(timeout):
            raise AssertionError("the slow request never reached the upstream")


def serve_connections(listener, handle):
    """Accepts until `listener` is closed; each connection is handle(conn) on a thread of its own."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


class EchoServer:
    """A TCP echo server (for CONNECT tunnels)."""

    def __init__(self):
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._sock.close()

    def _serve(self):
        serve_connections(self._sock, self._echo)

    @staticmethod
    def _echo(conn):
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(data)


class PiecemealUpstream:
    """An upstream on 127.0.0.1:0 that answers each request with the bytes of
    `pieces`, one send each, sending the next only once the proxy has read
    the last (its socket's receive queue, in /proc/net/tcp, is empty): the
    proxy reads each piece on its own."""

    def __init__(self):
        self.pieces = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        serve_connections(self.listener, self._answer)

    def _proxy_unread(self, proxy_port):
        """Bytes waiting in the proxy's end of this connection, or None while it is not listed."""
        with open("/proc/net/tcp") as table:
            for line in table.readlines()[1:]:
                fields = line.split()
                local, remote = fields[1].split(":"), fields[2].split(":")
                if int(local[1], 16) == proxy_port and int(remote[1], 16) == self.port:
                    return int(fields[4].split(":")[1], 16)
        return None

    def _answer(self, conn):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        proxy_port = conn.getpeername()[1]
        buffered = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffered:
                    part = conn.recv(65536)
                    if not part:
                        return
                    buffered += part
                buffered = buffered.partition(b"\r\n\r\n")[2]
                for piece in self.pieces:
                    conn.sendall(piece)
                    wait_until(lambda: self._proxy_unread(proxy_port) == 0, what="the proxy reading a piece")

    def close(self):
        self.listener.close()
