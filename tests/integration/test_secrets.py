"""Secrets never rest: a secret planted in every place a request can hold
one (credential headers, Proxy-Authorization, credential query parameters,
configured body fields, JSON and form bodies) is found in none of the
ledger's files (SQLite db, -wal, -shm), none of PostgreSQL's tables (a
pg_dump of the database) and no log line, after forwarded, replayed,
refused and reconciled calls. The provider did receive them (the test
plants real secrets, and finds a non-secret marker in the same files, so
it greps the right bytes). Also: the reconcile query takes the agent's
credentials only to the tool's own host."""
import base64
import os
import subprocess
import sys
import unittest
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from enforce_common import call, ledger_url, new_run  # noqa: E402
from harness import Proxy, wait_until  # noqa: E402
from provider import Provider  # noqa: E402

CONFIG = """\
listen: 127.0.0.1:0
threads: 2
ledger: {{ url: "{ledger}" }}
egress: {{ allow_hosts: ["*"], allow_loopback: true, allow_private: true }}
timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 2s, idle: 10s, drain: 5s }}
redact: {{ headers: [X-Custom-Secret], body: [/card/number, /card/cvc], query: [my_private_param] }}
tools:
  - name: pay.charge
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/charges }}
    effect: money
    receipt: /id
  - name: pay.refund
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/refunds }}
    effect: money
    policy: deny
  - name: desk.ticket
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/tickets }}
    effect: write
    reconcile: {{ mode: query, ttl: 15m, settle: 1s,
      query: {{ method: GET, url: "{query_base}/v1/charges/search?key={{key}}", found: /data/0 }} }}
    receipt: /id
"""


def token(name):
    return "%s-%s" % (name, uuid.uuid4().hex)


class Setup:
    BACKEND = "sqlite"
    QUERY_HOST = "127.0.0.1"

    def setUp(self):
        self.provider = Provider().__enter__()
        self.addCleanup(self.provider.__exit__, None, None, None)
        self.proxy = Proxy("")
        query_base = "http://%s:%d" % (self.QUERY_HOST, self.provider.port)
        with open(self.proxy.config_path, "w") as f:
            f.write(CONFIG.format(ledger=ledger_url(self.BACKEND, self.proxy.dir), port=self.provider.port,
                                  query_base=query_base))
        self.proxy.start()
        self.addCleanup(self.proxy.stop)
        self.run_id = new_run()

    def plant(self):
        s = {name: token(name) for name in (
            "authorization", "x-api-key", "api-key", "x-auth-token", "cookie", "x-custom-secret", "x-goog-api-key",
            "proxy-password", "q-api_key", "q-token", "q-client_secret", "q-sig", "q-apikey", "q-mine",
            "b-card", "b-cvc", "f-card")}
        s["proxy-basic"] = base64.b64encode(("%s:%s" % (self.run_id, s["proxy-password"])).encode()).decode()
        return s

    def headers(self, s):
        return {"Authorization": "Bearer " + s["authorization"], "X-Api-Key": s["x-api-key"],
                "Api-Key": s["api-key"], "X-Auth-Token": s["x-auth-token"], "Cookie": "session=" + s["cookie"],
                "X-Custom-Secret": s["x-custom-secret"], "X-Goog-Api-Key": s["x-goog-api-key"],
                "Proxy-Authorization": "Basic " + s["proxy-basic"]}

    def query(self, s, marker):
        return ("?api_key=%s&token=%s&Client-Secret=%s&sig=%s&APIKEY=%s&my_private_param=%s&marker=%s" %
                (s["q-api_key"], s["q-token"], s["q-client_secret"], s["q-sig"], s["q-apikey"], s["q-mine"], marker))

    def send(self, method, path, body, s, marker, content_type="application/json"):
        headers = self.headers(s)
        headers["Content-Type"] = content_type
        return call(self.proxy, method, self.provider.url(path + self.query(s, marker)), body, headers)

    def ledger_bytes(self):
        out = b""
        if self.BACKEND == "sqlite":
            files = [n for n in os.listdir(self.proxy.dir) if n.startswith("ledger.db")]
            self.assertIn("ledger.db", files)
            for name in files:
                with open(os.path.join(self.proxy.dir, name), "rb") as f:
                    out += f.read()
        else:
            dump = subprocess.run(["pg_dump", "--data-only", "--no-owner", os.environ["IDEMGATE_TEST_PG"]],
                                  capture_output=True, timeout=120)
            self.assertEqual(dump.returncode, 0, dump.stderr)
            out += dump.stdout
        return out

    def log_bytes(self):
        out = b""
        for name in os.listdir(self.proxy.dir):
            if name.endswith(".log"):
                with open(os.path.join(self.proxy.dir, name), "rb") as f:
                    out += f.read()
        return out

    def assert_nowhere(self, s, where):
        """where: (label, bytes, a non-secret string those bytes must hold)."""
        for label, blob, marker in where:
            self.assertIn(marker.encode(), blob, "%s: the marker is missing, so the grep reads the wrong bytes" % label)
            for name, secret in s.items():
                self.assertNotIn(secret.encode(), blob, "%s holds the %s secret" % (label, name))

    def reconciled_ticket(self, s, marker):
        """A ticket whose answer is lost (unknown), which the reconcile query
        settles inside the same request, then its retry, replayed. Returns
        the lookup's headers."""
        self.provider.script("commit_then_drop")
        first = self.send("POST", "/v1/tickets", {"title": marker}, s, marker)
        self.assertEqual(first.status, 200, first.body)
        self.assertEqual(first.header("idemgate-decision"), "reconciled")
        again = self.send("POST", "/v1/tickets", {"title": marker}, s, marker)
        self.assertEqual(again.header("idemgate-decision"), "replayed", again.body)
        lookups = [r for r in self.provider.requests if r[2].startswith("/v1/charges/search")]
        self.assertEqual(len(lookups), 1)
        self.assertEqual(len([e for e in self.provider.effects_snapshot() if e["path"] == "/v1/tickets"]), 1)
        return lookups[0][3]

class SecretCases(Setup):
    def test_planted_secrets_are_stored_and_logged_nowhere(self):
        s = self.plant()
        marker = token("marker")
        charge = {"amount": 1000, "currency": "eur", "marker": marker,
                  "card": {"number": s["b-card"], "cvc": s["b-cvc"]}}
        first = self.send("POST", "/v1/charges", charge, s, marker)
        self.assertEqual(first.status, 200, first.body)
        again = self.send("POST", "/v1/charges", charge, s, marker)
        self.assertEqual(again.header("idemgate-decision"), "replayed")
        form = ("amount=5&currency=eur&marker=%s&card[number]=%s" % (marker, s["f-card"])).encode()
        self.assertEqual(self.send("POST", "/v1/charges", form, s, marker,
                                   "application/x-www-form-urlencoded").status, 200)
        refused = self.send("POST", "/v1/refunds", {"charge": "ch_1", "marker": marker}, s, marker)
        self.assertEqual(refused.status, 403)
        # An unknown outcome, reconciled by the query: the lookup goes out
        # too, and the unknown's request snapshot is stored.
        self.reconciled_ticket(s, marker)

        # The provider did get the secrets: they were really planted.
        got = [r for r in self.provider.requests if r[1] == "POST" and r[2].startswith("/v1/charges?")][0]
        self.assertEqual(got[3].get("X-Api-Key"), s["x-api-key"])
        self.assertIn(s["q-api_key"], got[2])

        # The log names the run (the user of Proxy-Authorization), never its password.
        self.assert_nowhere(s, [("the ledger", self.ledger_bytes(), marker),
                                ("the log", self.log_bytes(), self.run_id)])
        self.proxy.stop()
        self.assert_nowhere(s, [("the ledger after stop", self.ledger_bytes(), marker),
                                ("the log after stop", self.log_bytes(), self.run_id)])


class QueryCredentialCases(Setup):
    def test_reconcile_query_credentials(self):
        s = self.plant()
        sent = self.reconciled_ticket(s, "m")
        if self.QUERY_HOST == "127.0.0.1":  # the tool's own host (loopback: plain HTTP allowed)
            self.assertEqual(sent.get("Authorization"), "Bearer " + s["authorization"])
            self.assertEqual(sent.get("X-Api-Key"), s["x-api-key"])
        else:  # another host: no credential travels
            for name in ("Authorization", "X-Api-Key", "Api-Key", "Cookie", "Proxy-Authorization"):
                self.assertIsNone(sent.get(name), name)


class SqliteSecrets(SecretCases, QueryCredentialCases, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresSecrets(SecretCases, unittest.TestCase):
    BACKEND = "postgresql"


class QueryToAnotherHost(QueryCredentialCases, unittest.TestCase):
    """The query URL names localhost while the tool's host is 127.0.0.1: the
    same machine, but not the tool's own host, so the lookup is sent bare."""
    BACKEND = "sqlite"
    QUERY_HOST = "localhost"


if __name__ == "__main__":
    unittest.main(verbosity=2)
