"""A Stripe-like provider simulator for enforcement tests.

It applies effects (charges) and records every request, every key it saw and
every effect it applied, so a test can count duplicates. Like Stripe it
honours Idempotency-Key: a key it has seen gets the stored answer back and
applies nothing. Faults are scripted per request, in order:

  provider.script("commit_then_drop")  # apply the effect, then drop the connection
  provider.script("status", 429, {"Retry-After": "1"})
  provider.script("status", 500, {"Stripe-Should-Retry": "false"})
  provider.script("hold")              # apply, then wait for release() before answering
  provider.script("drop_before")       # drop the connection without applying anything
  provider.script("slow", seconds=4)   # take 4 s, then apply and answer; meanwhile the key is
                                       # "in use" (a same-key request is answered 409, like Stripe)
  provider.script("drop_then_commit", seconds=2)  # drop at once, apply 2 s later (asynchronously)

Provider(dedup=False) ignores keys (every POST applies an effect);
Provider(latency=(0.02, 0.08)) takes a random time before applying each write;
Provider(gzip=True) compresses answers for a client that accepts gzip.

Paths: POST /v1/charges (money), POST /v1/tickets (write), any other POST
/v1/NAME (a write), GET /v1/items/ID (read), GET /v1/charges/search?key=K
(lookup by idempotency key: the reconcile query).
"""
import gzip
import json
import random
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

from upstream import ServerThread


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status, payload, headers=None):
        data = json.dumps(payload).encode()
        headers = dict(headers or {})
        if self.server.owner.gzip and "gzip" in (self.headers.get("Accept-Encoding") or "").lower():
            data = gzip.compress(data)
            headers["Content-Encoding"] = "gzip"
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up on a slow answer: it stays applied
            self.close_connection = True
        self.server.owner._answered(status)

    def _handle(self):
        p = self.server.owner
        body = self._body()
        url = urllib.parse.urlsplit(self.path)
        key = self.headers.get("Idempotency-Key")
        p._record(self.command, self.path, dict(self.headers.items()), body, key)
        if self.command == "GET" and url.path == "/v1/charges/search":
            wanted = dict(urllib.parse.parse_qsl(url.query)).get("key")
            found = [e for e in p.effects_snapshot() if e["key"] == wanted]
            return self._send(200, {"object": "list", "data": found})
        if self.command == "GET" and url.path.startswith("/v1/items/"):
            fault = p._next_fault()
            if fault and fault[0] == "status":
                return self._send(fault[1], {"error": "scripted"}, fault[2])
            return self._send(200, {"id": url.path.rsplit("/", 1)[-1]})
        if self.command == "POST" and url.path.startswith("/v1/"):
            with p._lock:
                in_use = key is not None and key in p._in_use
            if in_use:
                return self._send(409, {"error": {"type": "idempotency_error", "message":
                                                  "There is currently another in-progress request using "
                                                  "this Idempotent Key"}})
            fault = p._next_fault()
            if fault and fault[0] == "status":
                return self._send(fault[1], {"error": {"message": "scripted %d" % fault[1]}}, fault[2])
            if fault and fault[0] == "drop_before":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault and fault[0] == "drop_then_commit":
                later = threading.Timer(fault[3], p._apply, (key, body, url.path))
                later.daemon = True
                later.start()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault and fault[0] == "slow":
                with p._lock:
                    if key is not None and p.dedup:
                        p._in_use.add(key)
                time.sleep(fault[3])  # the provider itself is slow to process this write
            elif p.latency:
                time.sleep(random.uniform(*p.latency))
            stored, replay = p._apply(key, body, url.path)
            if fault and fault[0] == "commit_then_drop" and not replay:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault and fault[0] == "hold" and not replay:
                p._held.set()
                p._release.wait(30)
            headers = {"Idempotent-Replayed": "true"} if replay else {}
            return self._send(200, {"id": stored["id"], "object": "charge"}, headers)
        return self._send(404, {"error": "no such path"})

    do_GET = do_POST = _handle


class Provider(ServerThread):
    def __init__(self, dedup=True, latency=None, gzip=False):
        self.dedup = dedup
        self.latency = latency
        self.gzip = gzip
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.requests = []  # (monotonic time, method, path, headers, body, key)
        self.answers = []  # (monotonic time, status) of every answer written
        self.effects = []
        self._in_use = set()
        self._by_key = {}
        self._seq = 0
        self._faults = []
        self._held = threading.Event()
        self._release = threading.Event()
        super().__init__(_Handler)
        report = self._server.handle_error

        def quiet_resets(request, address):
            if not isinstance(sys.exc_info()[1], ConnectionError):  # a client killed mid-request is a test case
                report(request, address)

        self._server.handle_error = quiet_resets

    def __exit__(self, *exc):
        self._release.set()  # a held request must not outlive the server
        super().__exit__(*exc)

    def reset(self):
        """Forgets scripted faults and a past hold/release (tests sharing one
        provider start clean; what was recorded stays)."""
        with self._lock:
            self._faults.clear()
        self._held.clear()
        self._release.clear()

    def script(self, kind, status=0, headers=None, seconds=0.0):
        with self._lock:
            self._faults.append((kind, status, headers or {}, seconds))

    def _apply(self, key, body, path):
        """Applies one write (or finds the stored one for a known key):
        returns (effect, replayed)."""
        with self._lock:
            self._in_use.discard(key)
            if self.dedup and key and key in self._by_key:
                return self._by_key[key], True
            self._seq += 1
            effect = {"id": "ch_%d" % self._seq, "key": key, "body": body.decode(errors="replace"), "path": path,
                      "at": time.monotonic()}
            self.effects.append(effect)
            if key:
                self._by_key[key] = effect
            self._cond.notify_all()
            return effect, False

    def _answered(self, status):
        with self._cond:
            self.answers.append((time.monotonic(), status))
            self._cond.notify_all()

    def searches(self):
        with self._lock:
            return [r for r in self.requests if r[1] == "GET" and r[2].startswith("/v1/charges/search")]

    def _next_fault(self):
        with self._lock:
            return self._faults.pop(0) if self._faults else None

    def _record(self, method, path, headers, body, key):
        with self._cond:
            self.requests.append((time.monotonic(), method, path, headers, body, key))
            self._cond.notify_all()

    def effects_snapshot(self):
        with self._lock:
            return list(self.effects)

    def writes(self, path="/v1/charges"):
        with self._lock:
            return [r for r in self.requests if r[1] == "POST" and r[2] == path]

    def keys_seen(self, path="/v1/charges"):
        return {r[5] for r in self.writes(path)}

    def wait_held(self, timeout=10):
        if not self._held.wait(timeout):
            raise AssertionError("the held request never reached the provider")

    def release(self):
        self._release.set()
