"""Shared set-up for enforcement tests: a provider simulator, an idemgate
with guarded tools in front of it, and one client helper. Every test case
runs once per ledger backend (SQLite file, and the PostgreSQL that
scripts/test starts)."""
import http.client
import json
import os
import subprocess
import sys
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN, Proxy  # noqa: E402
from provider import Provider  # noqa: E402

TOOLS = """\
tools:
  - name: pay.charge
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/charges }}
    effect: money
    idempotency: {{ header: Idempotency-Key, mode: inject }}
    retry: {{ bound: 2, retry_after: hold, max_retry_after: 5s }}
    classify: [ {{ status: 402, class: money_rejected }} ]
    reconcile: {{ mode: same_key, ttl: 15m }}
    receipt: /id
    require: [/amount, /currency]
  - name: pay.payout
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/payouts }}
    effect: money
    policy: pending_approval
    receipt: /id
  - name: pay.refund
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/refunds }}
    effect: money
    policy: deny
  - name: desk.ticket
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/tickets }}
    effect: write
    retry: {{ bound: 2 }}
    reconcile: {{ mode: {ticket_reconcile}, ttl: 15m{ticket_query} }}
    receipt: /id
  - name: items.get
    match: {{ host: 127.0.0.1, port: {port}, method: GET, path: "/v1/items/{{id}}" }}
    effect: read
    retry: {{ bound: 2, retry_after: hold, max_retry_after: 5s }}
"""

QUERY = """, settle: {settle},
      query: {{ method: GET, url: "http://127.0.0.1:{port}/v1/charges/search?key={{key}}", found: /data/0 }}"""


def ledger_url(backend, directory):
    if backend == "sqlite":
        return "sqlite:" + os.path.join(directory, "ledger.db")
    url = os.environ.get("IDEMGATE_TEST_PG")
    if not url:
        raise AssertionError("IDEMGATE_TEST_PG is not set: run through scripts/test (it starts PostgreSQL)")
    return url


def make_config(provider_port, ledger, ticket_reconcile="same_key", settle="1s", upstream_response="2s",
                budget=1000):
    query = QUERY.format(port=provider_port, settle=settle) if ticket_reconcile == "query" else ""
    return ("listen: 127.0.0.1:0\nthreads: 2\n"
            "ledger: {{ url: \"{ledger}\" }}\n"
            "egress: {{ allow_hosts: [\"*\"], allow_loopback: true, allow_private: true }}\n"
            "timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: {ur}, idle: 3s, drain: 5s, "
            "outcome_record: 1s }}\n"
            "runs: {{ budget: {budget} }}\n").format(ledger=ledger, ur=upstream_response, budget=budget) + \
        TOOLS.format(port=provider_port, ticket_reconcile=ticket_reconcile, ticket_query=query)


class Answer:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def header(self, name):
        return self.headers.get(name.lower())

    def json(self):
        return json.loads(self.body)


def request(port, method, target, body=None, headers=None, timeout=30):
    """One request to 127.0.0.1:port on a fresh connection; a dict or list body is sent as JSON."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"} if body is not None else {}
    h.update(headers or {})
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    conn.request(method, target, body=data, headers=h)
    r = conn.getresponse()
    out = Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    conn.close()
    return out


def call(proxy, method, url, body=None, headers=None, run=None, timeout=30):
    """One request through the proxy on a fresh connection."""
    h = {"Idemgate-Run": run} if run else {}
    h.update(headers or {})
    return request(proxy.port, method, url, body, h, timeout)


def escalations(proxy):
    out = subprocess.run([BIN, "escalations", "list", "--config", proxy.config_path],
                         capture_output=True, cwd=proxy.dir, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    return [json.loads(line) for line in out.stdout.decode().splitlines() if line.strip()]


def ops(proxy, *args):
    """Runs an operator command (idemgate runs|escalations|intents ...) on the proxy's ledger."""
    out = subprocess.run([BIN, *args, "--config", proxy.config_path], capture_output=True, cwd=proxy.dir, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    return [json.loads(line) for line in out.stdout.decode().splitlines() if line.strip().startswith("{")]


def new_run():
    return "run-" + uuid.uuid4().hex[:12]


class Backends:
    """Mixin: subclasses set BACKEND; setUp gives self.provider and self.proxy."""
    BACKEND = "sqlite"
    TICKET_RECONCILE = "same_key"
    UPSTREAM_RESPONSE = "2s"
    BUDGET = 1000

    def setUp(self):
        self.provider = Provider().__enter__()
        self.addCleanup(self.provider.__exit__, None, None, None)
        self.proxy = self.start_proxy()
        self.run_id = new_run()

    def start_proxy(self, directory=None):
        proxy = Proxy("")
        directory = directory or proxy.dir
        proxy.dir = directory
        proxy.config_path = os.path.join(directory, "config.yaml")
        proxy.port_file = os.path.join(directory, "port")
        proxy.stderr_path = os.path.join(directory, "stderr-%s.log" % uuid.uuid4().hex[:6])
        if os.path.exists(proxy.port_file):
            os.unlink(proxy.port_file)
        with open(proxy.config_path, "w") as f:
            f.write(make_config(self.provider.port, ledger_url(self.BACKEND, directory),
                                ticket_reconcile=self.TICKET_RECONCILE, upstream_response=self.UPSTREAM_RESPONSE,
                                budget=self.BUDGET))
        proxy.start()
        self.addCleanup(proxy.stop)
        return proxy

    def call(self, method, path, body=None, headers=None, run=None, proxy=None):
        return call(proxy or self.proxy, method, self.provider.url(path), body, headers, run or self.run_id)
