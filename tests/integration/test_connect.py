"""CONNECT to a host that has tools: never a blind tunnel past them.

With tls.intercept off, CONNECT to a tool's host is refused 403
intercept_required (naming the config key) and nothing reaches the
provider; check-config and start-up warn about such tools. With
interception on, a client that speaks plain HTTP inside the tunnel (curl
--proxytunnel, undici 7's ProxyAgent with proxyTunnel for http:// URLs) is
served by the same pipeline as absolute-form requests: guarded, replayed,
one effect."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN, Proxy, read_head, wait_until  # noqa: E402
from node_deps import CLEAN_ENV, UNDICI_7, node_modules, run_node  # noqa: E402
from provider import Provider  # noqa: E402
from tls_upstream import HttpsProvider, TestCa  # noqa: E402

CHARGE = {"amount": 1000, "currency": "eur", "customer": "cus_1"}
CLIENTS = os.path.join(os.path.dirname(__file__), "clients")

CONFIG = """\
listen: 127.0.0.1:0
threads: 2
ledger: {{ url: "sqlite:./ledger.db" }}
tls: {tls}
egress: {{ allow_hosts: ["*"], allow_loopback: true, allow_private: false }}
timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 5s, idle: 10s, drain: 5s }}
tools:
  - name: pay.charge
    match: {{ host: {host}, port: {port}, method: POST, path: /v1/charges }}
    effect: money
    reconcile: {{ mode: same_key, ttl: 15m }}
    receipt: /id
  - name: pay.any_port
    match: {{ host: {host}, method: POST, path: /v1/payouts }}
    effect: money
"""


def connect_raw(proxy_port, authority):
    """Sends a bare CONNECT; returns (status, headers, body) of the answer."""
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=10) as s:
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
        head, _, body = read_head(s).partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        want = int(headers.get("content-length", "0"))
        while len(body) < want:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
        return int(lines[0].split()[1]), headers, body


class InterceptOffTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="idemgate-connect-")
        ca = TestCa(cls.dir)
        cls.test_ca = ca.cert
        cls.cert = ca.cert_for("localhost", "DNS:localhost,IP:127.0.0.1")

    def setUp(self):
        self.provider = HttpsProvider(*self.cert).__enter__()
        self.addCleanup(self.provider.__exit__, None, None, None)
        self.config = CONFIG.format(tls="{ intercept: false }", host="localhost", port=self.provider.port)
        self.proxy = Proxy(self.config).start()
        self.addCleanup(self.proxy.stop)

    def test_connect_to_a_tool_host_is_403_intercept_required(self):
        status, headers, body = connect_raw(self.proxy.port, "localhost:%d" % self.provider.port)
        self.assertEqual(status, 403)
        self.assertEqual(headers["content-type"], "application/problem+json")
        problem = json.loads(body)
        self.assertEqual(problem["reason_code"], "intercept_required")
        self.assertEqual(problem["config_key"], "tls.intercept")
        self.assertIn("tls.intercept", problem["detail"])
        self.assertEqual(problem["error"]["code"], "intercept_required")
        self.assertIn("pay.charge", problem["tools"])
        # A real client: curl fails on the refused CONNECT; nothing reached the provider.
        out = subprocess.run(["curl", "-sS", "--max-time", "20", "-x", self.proxy.proxy_url(), "--cacert",
                              self.test_ca, "-H", "Content-Type: application/json", "--data", json.dumps(CHARGE),
                              self.provider.url("/v1/charges")], capture_output=True, timeout=60, env=CLEAN_ENV)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(b"403", out.stderr)
        self.assertEqual(self.provider.requests, [])
        self.assertEqual(self.provider.effects_snapshot(), [])
        logged = wait_until(lambda: [e for e in self.proxy.log_lines() if e.get("event") == "intercept_required"],
                            10, "an intercept_required log line")
        self.assertEqual(logged[0]["host"], "localhost")

    def test_host_without_tools_is_still_tunnelled(self):
        # 127.0.0.1 is not a tool host (tools name localhost): a blind tunnel.
        out = subprocess.run(["curl", "-sS", "--max-time", "20", "-x", self.proxy.proxy_url(), "--cacert",
                              self.test_ca, self.provider.url("/v1/items/1", host="127.0.0.1")],
                             capture_output=True, timeout=60, env=CLEAN_ENV)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["id"], "1")

    def test_check_config_and_start_up_warn(self):
        out = subprocess.run([BIN, "check-config", self.proxy.config_path], capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        err = out.stderr.decode()
        # pay.any_port (any port) is warned about; pay.charge has a fixed non-443 port.
        self.assertIn("warning: ", err)
        self.assertIn("pay.any_port", err)
        self.assertIn("intercept_required", err)
        warnings = [e for e in self.proxy.log_lines() if e.get("event") == "config_warning"]
        self.assertTrue(any("pay.any_port" in w["detail"] for w in warnings), warnings)


class PlainHttpInsideConnectTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="idemgate-connect-")
        ca_dir = os.path.join(cls.dir, "ca")
        out = subprocess.run([BIN, "ca", "init", "--dir", ca_dir], capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr.decode()
        cls.tls = '{ intercept: true, ca_cert: "%s/ca.pem", ca_key: "%s/ca.key" }' % (ca_dir, ca_dir)

    def setUp(self):
        self.provider = Provider().__enter__()
        self.addCleanup(self.provider.__exit__, None, None, None)
        cfg = CONFIG.format(tls=self.tls, host="127.0.0.1", port=self.provider.port).replace(
            "allow_loopback: true, allow_private: false", "allow_loopback: true, allow_private: true")
        self.proxy = Proxy(cfg).start()
        self.addCleanup(self.proxy.stop)

    def assert_guarded_once(self, answers):
        first, second = answers
        self.assertEqual(first["status"], 200, first)
        self.assertEqual(first["headers"].get("idemgate-decision"), "forwarded", first)
        self.assertEqual(second["headers"].get("idemgate-decision"), "replayed", second)
        self.assertEqual(json.loads(first["body"])["id"], json.loads(second["body"])["id"])
        self.assertEqual(len(self.provider.effects_snapshot()), 1)
        self.assertEqual(self.provider.writes()[0][5], first["headers"].get("idemgate-key"))

    def assert_tunnelled_plain(self, n):
        """The calls really came through CONNECT, as plain HTTP inside it."""
        connects = wait_until(lambda: [e for e in self.proxy.log_lines()
                                       if e.get("event") == "request" and e.get("method") == "CONNECT"] or None,
                              10, "CONNECT log lines")
        self.assertGreaterEqual(len(connects), 1)
        self.assertLessEqual(len(connects), n)
        self.assertTrue(all(c.get("intercepted") == "http" for c in connects), connects)

    def test_curl_proxytunnel_plain_http(self):
        answers = []
        for _ in range(2):
            out = subprocess.run(["curl", "-sS", "--max-time", "20", "-p", "-x", self.proxy.proxy_url(),
                                  "-D", "-", "-H", "Content-Type: application/json", "-H", "Idemgate-Run: run-curl-p",
                                  "--data", json.dumps(CHARGE), self.provider.url("/v1/charges")],
                                 capture_output=True, timeout=60, env=CLEAN_ENV)
            self.assertEqual(out.returncode, 0, out.stderr)
            raw = out.stdout.split(b"\r\n\r\n", 1)[1]  # after "200 Connection Established"
            head, _, body = raw.partition(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            answers.append({"status": int(lines[0].split()[1]), "headers": headers, "body": body.decode()})
        self.assert_guarded_once(answers)
        self.assert_tunnelled_plain(2)

    def test_undici_proxy_agent_with_proxy_tunnel(self):
        modules = node_modules("undici7", UNDICI_7)
        out = run_node(os.path.join(CLIENTS, "undici_fetch.js"),
                       ["proxy", "tunnel", self.provider.url("/v1/charges"), json.dumps(CHARGE), "run-undici", "2",
                        self.proxy.proxy_url()], modules)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        self.assert_guarded_once(json.loads(out.stdout))
        self.assert_tunnelled_plain(2)
        headers = {k.lower() for k in self.provider.writes()[0][3]}
        self.assertNotIn("idemgate-run", headers)
        decisions = [e for e in self.proxy.log_lines() if e.get("event") == "decision"]
        self.assertTrue(decisions and all(d["run"] == "run-undici" for d in decisions), decisions)


if __name__ == "__main__":
    unittest.main(verbosity=2)
