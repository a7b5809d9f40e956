"""HTTPS end to end with real clients: TLS interception with idemgate's own
CA (curl, python3 requests, Node 20 fetch through undici's ProxyAgent),
verified TLS toward the upstream (a wrong certificate is 502
upstream_tls_failed), and a gateway route to an HTTPS upstream. Every case
does a guarded POST twice and asserts one effect: the second answer is the
stored one, replayed."""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN, Proxy, wait_until  # noqa: E402
from node_deps import CLEAN_ENV, UNDICI_6, node, node_modules  # noqa: E402
from tls_upstream import HttpsProvider, TestCa  # noqa: E402

CHARGE = {"amount": 1000, "currency": "eur", "customer": "cus_1"}

CONFIG = """\
listen: 127.0.0.1:0
threads: 2
ledger: {{ url: "sqlite:./ledger.db" }}
tls: {{ intercept: true, ca_cert: "{ca_dir}/ca.pem", ca_key: "{ca_dir}/ca.key", upstream_ca_file: "{upstream_ca}",
       intercept_hosts: {intercept_hosts} }}
egress: {{ allow_hosts: ["*"], allow_loopback: true, allow_private: false }}
timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 5s, idle: 10s, drain: 5s }}
runs: {{ budget: 1000 }}
routes:
  - {{ prefix: /pay/, upstream: "https://localhost:{port}/" }}
  - {{ prefix: /wrong/, upstream: "https://localhost:{wrong_port}/" }}
tools:
  - name: pay.charge
    match: {{ host: localhost, port: {port}, method: POST, path: /v1/charges }}
    effect: money
    idempotency: {{ header: Idempotency-Key, mode: inject }}
    retry: {{ bound: 2 }}
    reconcile: {{ mode: same_key, ttl: 15m }}
    receipt: /id
  - name: desk.ticket
    match: {{ host: localhost, port: {port}, method: POST, path: /v1/tickets }}
    effect: write
    retry: {{ bound: 2 }}
    reconcile: {{ mode: query, ttl: 15m, settle: 1s,
      query: {{ method: GET, url: "https://localhost:{port}/v1/charges/search?key={{key}}", found: /data/0 }} }}
    receipt: /id
  - name: wrong.charge
    match: {{ host: localhost, port: {wrong_port}, method: POST, path: /v1/charges }}
    effect: money
    reconcile: {{ mode: same_key, ttl: 15m }}
"""



NODE_CLIENT = r"""
const { ProxyAgent, fetch } = require('undici');
const [proxy, url, body, run] = process.argv.slice(1);  // node -e: argv[1] is the first argument
(async () => {
  const dispatcher = new ProxyAgent({ uri: proxy });
  const out = [];
  for (let i = 0; i < 2; i++) {
    const r = await fetch(url, { method: 'POST', body, dispatcher,
                                 headers: { 'content-type': 'application/json', 'idemgate-run': run } });
    out.push({ status: r.status, headers: Object.fromEntries(r.headers.entries()), body: await r.text() });
  }
  await dispatcher.close();
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e && e.cause ? e.cause : e); process.exit(1); });
"""

REQUESTS_CLIENT = r"""
import json, sys
import requests
url, body, run = sys.argv[1:4]
out = []
with requests.Session() as s:  # both calls on one intercepted connection
    for _ in range(2):
        r = s.post(url, data=body, headers={"Content-Type": "application/json", "Idemgate-Run": run}, timeout=30)
        out.append({"status": r.status_code, "headers": {k.lower(): v for k, v in r.headers.items()},
                    "body": r.text})
print(json.dumps(out))
"""


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="idemgate-tls-")
        cls.test_ca = TestCa(cls.dir)
        good = cls.test_ca.cert_for("localhost", "DNS:localhost,IP:127.0.0.1")
        wrong = cls.test_ca.cert_for("wrong.test", "DNS:wrong.test")
        cls.ca_dir = os.path.join(cls.dir, "idemgate-ca")
        out = subprocess.run([BIN, "ca", "init", "--dir", cls.ca_dir], capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr.decode()
        cls.proxy_ca = os.path.join(cls.ca_dir, "ca.pem")
        cls.wrong = HttpsProvider(*wrong).__enter__()
        cls.provider_cert = good

    @classmethod
    def tearDownClass(cls):
        cls.wrong.__exit__(None, None, None)

    INTERCEPT_HOSTS = "[]"

    def setUp(self):
        self.provider = HttpsProvider(*self.provider_cert).__enter__()
        self.addCleanup(self.provider.__exit__, None, None, None)
        cfg = CONFIG.format(ca_dir=self.ca_dir, upstream_ca=self.test_ca.cert, port=self.provider.port,
                            wrong_port=self.wrong.port, intercept_hosts=self.INTERCEPT_HOSTS)
        self.proxy = Proxy(cfg).start()
        self.addCleanup(self.proxy.stop)

    def assert_one_effect_replayed(self, answers):
        first, second = answers
        self.assertEqual(first["status"], 200, first)
        self.assertEqual(first["headers"].get("idemgate-decision"), "forwarded", first)
        self.assertEqual(second["status"], 200, second)
        self.assertEqual(second["headers"].get("idemgate-decision"), "replayed", second)
        self.assertEqual(second["headers"].get("idempotent-replayed"), "true", second)
        self.assertEqual(json.loads(first["body"])["id"], json.loads(second["body"])["id"])
        self.assertEqual(len(self.provider.effects_snapshot()), 1)
        self.assertEqual(len(self.provider.writes()), 1)
        # The upstream got the key idemgate minted, over TLS.
        key = self.provider.writes()[0][5]
        self.assertEqual(key, first["headers"].get("idemgate-key"))

    def curl(self, *args):
        cmd = ["curl", "-sS", "--max-time", "30", "-D", "-", "-o", "-"] + list(args)
        out = subprocess.run(cmd, capture_output=True, timeout=60, env=CLEAN_ENV)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        raw = out.stdout
        # -D - writes CONNECT's "200 Connection Established" block first.
        blocks = raw.split(b"\r\n\r\n")
        while blocks and b"Connection Established" in blocks[0].split(b"\r\n")[0]:
            raw = raw.split(b"\r\n\r\n", 1)[1]
            blocks = raw.split(b"\r\n\r\n")
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        return {"status": int(lines[0].split()[1]), "headers": headers, "body": body.decode()}

    def test_curl_through_interception(self):
        # The run is named by the proxy user name on the CONNECT.
        proxy = "http://run-curl:secret@127.0.0.1:%d" % self.proxy.port
        answers = [self.curl("-x", proxy, "--cacert", self.proxy_ca, "-H", "Content-Type: application/json",
                             "--data", json.dumps(CHARGE), self.provider.url("/v1/charges")) for _ in range(2)]
        self.assert_one_effect_replayed(answers)
        decisions = wait_until(lambda: [e for e in self.proxy.log_lines() if e.get("event") == "decision"] or None,
                               10, "decision log lines")
        self.assertTrue(all(d["run"] == "run-curl" for d in decisions), decisions)
        # Neither the credentials nor idemgate's own headers went upstream.
        headers = {k.lower() for k in self.provider.writes()[0][3]}
        self.assertNotIn("proxy-authorization", headers)
        self.assertNotIn("idemgate-run", headers)

    def test_python_requests_through_interception(self):
        env = dict(CLEAN_ENV, HTTPS_PROXY="http://127.0.0.1:%d" % self.proxy.port, REQUESTS_CA_BUNDLE=self.proxy_ca)
        out = subprocess.run([sys.executable, "-c", REQUESTS_CLIENT, self.provider.url("/v1/charges"),
                              json.dumps(CHARGE), "run-requests"], capture_output=True, timeout=120, env=env)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        self.assert_one_effect_replayed(json.loads(out.stdout))

    def test_node_fetch_through_undici_proxy_agent(self):
        modules = node_modules("undici6", UNDICI_6)
        env = dict(CLEAN_ENV, NODE_EXTRA_CA_CERTS=self.proxy_ca, NODE_PATH=modules)
        out = subprocess.run([node(), "-e", NODE_CLIENT, "http://127.0.0.1:%d" % self.proxy.port,
                              self.provider.url("/v1/charges"), json.dumps(CHARGE), "run-node"],
                             capture_output=True, timeout=120, env=env)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        self.assert_one_effect_replayed(json.loads(out.stdout))

    def test_wrong_upstream_certificate_is_502_upstream_tls_failed(self):
        url = self.wrong.url("/v1/charges")
        for extra in ([], ["-X", "GET"]):  # the guarded path, then pass-through (no tool matches GET)
            answer = self.curl("-x", "http://127.0.0.1:%d" % self.proxy.port, "--cacert", self.proxy_ca,
                               "-H", "Content-Type: application/json", "--data", json.dumps(CHARGE), *extra, url)
            self.assertEqual(answer["status"], 502, answer)
            self.assertEqual(answer["headers"]["content-type"], "application/problem+json")
            problem = json.loads(answer["body"])
            self.assertEqual(problem["reason_code"], "upstream_tls_failed", problem)
            self.assertIn("wrong.test", problem["detail"])
        # Through a gateway route too; and nothing was ever sent in plain text.
        conn = http.client.HTTPConnection("127.0.0.1", self.proxy.port, timeout=30)
        conn.request("GET", "/wrong/v1/items/1")
        r = conn.getresponse()
        self.assertEqual(r.status, 502)
        self.assertEqual(json.loads(r.read())["reason_code"], "upstream_tls_failed")
        self.assertEqual(len(self.wrong.requests), 0)

    def test_gateway_route_enforces_the_same_policy(self):
        answers = []
        for _ in range(2):
            conn = http.client.HTTPConnection("127.0.0.1", self.proxy.port, timeout=30)
            conn.request("POST", "/pay/v1/charges", body=json.dumps(CHARGE),
                         headers={"Content-Type": "application/json", "Idemgate-Run": "run-route"})
            r = conn.getresponse()
            answers.append({"status": r.status, "headers": {k.lower(): v for k, v in r.getheaders()},
                            "body": r.read().decode()})
            conn.close()
        self.assertEqual(answers[0]["headers"].get("idemgate-tool"), "pay.charge")
        self.assert_one_effect_replayed(answers)
        # The upstream saw its own path and Host, not the route's.
        recorded = self.provider.writes()[0]
        self.assertEqual(recorded[2], "/v1/charges")
        self.assertEqual(recorded[3].get("Host"), "localhost:%d" % self.provider.port)

    def test_reconcile_query_over_https(self):
        # The provider applies the ticket and drops the connection: unknown.
        # idemgate asks the provider, over verified TLS, by the key, inside
        # the same request; the second call is a replay.
        self.provider.script("commit_then_drop")
        answers = []
        for _ in range(2):
            conn = http.client.HTTPConnection("127.0.0.1", self.proxy.port, timeout=30)
            conn.request("POST", "/pay/v1/tickets", body=json.dumps({"title": "t"}),
                         headers={"Content-Type": "application/json", "Idemgate-Run": "run-query"})
            r = conn.getresponse()
            answers.append((r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(r.read())))
            conn.close()
        (s1, h1, found), (s2, h2, again) = answers
        self.assertEqual(s1, 200, found)
        self.assertEqual(h1.get("idemgate-decision"), "reconciled")
        self.assertEqual(found["key"], h1.get("idemgate-key"))
        self.assertEqual(s2, 200, again)
        self.assertEqual(h2.get("idemgate-decision"), "replayed")
        self.assertEqual(again, found)
        self.assertEqual(len(self.provider.writes("/v1/tickets")), 1)
        searches = [r for r in self.provider.requests if r[2].startswith("/v1/charges/search")]
        self.assertEqual(len(searches), 1)

    def test_origin_form_without_route_is_still_not_a_proxy_request(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.proxy.port, timeout=30)
        conn.request("GET", "/elsewhere/x")
        r = conn.getresponse()
        self.assertEqual(r.status, 400)
        self.assertEqual(json.loads(r.read())["reason_code"], "not_a_proxy_request")

    def test_host_without_tools_is_a_blind_tunnel(self):
        # 127.0.0.1 has no tools: the agent talks TLS with the upstream itself
        # and sees the upstream's certificate (the test CA), not a minted one.
        url = self.provider.url("/v1/items/1", host="127.0.0.1")
        answer = self.curl("-x", "http://127.0.0.1:%d" % self.proxy.port, "--cacert", self.test_ca.cert, url)
        self.assertEqual(answer["status"], 200, answer)
        self.assertNotIn("idemgate-tool", answer["headers"])
        self.assertNotIn("via", answer["headers"])
        out = subprocess.run(["curl", "-sS", "--max-time", "30", "-x", "http://127.0.0.1:%d" % self.proxy.port,
                              "--cacert", self.proxy_ca, url], capture_output=True, timeout=60, env=CLEAN_ENV)
        self.assertNotEqual(out.returncode, 0, "a blind tunnel must not present idemgate's leaf")


class InterceptHostsTest(TlsTest):
    """tls.intercept_hosts: a host with no tools is intercepted too."""
    INTERCEPT_HOSTS = '["127.0.0.1"]'

    def test_host_without_tools_is_a_blind_tunnel(self):
        url = self.provider.url("/v1/items/1", host="127.0.0.1")
        answer = self.curl("-x", "http://127.0.0.1:%d" % self.proxy.port, "--cacert", self.proxy_ca, url)
        self.assertEqual(answer["status"], 200, answer)
        self.assertIn("idemgate", answer["headers"].get("via", ""))  # served by idemgate, over its own leaf


if __name__ == "__main__":
    unittest.main(verbosity=2)
