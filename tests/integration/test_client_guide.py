"""docs/clients.md is true: every `<!-- guide: NAME -->` snippet is run twice
through idemgate (HTTPS tools with interception, http:// tools with both
undici tunnel settings) and must give `forwarded` then `replayed` with one
effect at the provider; every `<!-- excerpt: FILE -->` block must be lines
of a client the other tests run. The OpenAI Node SDK raises APIError with
the reason_code on a refusal."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN, Proxy, wait_until  # noqa: E402
from node_deps import CLEAN_ENV, OPENAI, UNDICI_7, node, node_modules  # noqa: E402
from provider import Provider  # noqa: E402
from tls_upstream import HttpsProvider, TestCa  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GUIDE = os.path.join(ROOT, "docs", "clients.md")

CONFIG = """\
listen: 127.0.0.1:0
threads: 2
ledger: {{ url: "sqlite:./ledger.db" }}
tls: {{ intercept: true, ca_cert: "{ca_dir}/ca.pem", ca_key: "{ca_dir}/ca.key", upstream_ca_file: "{upstream_ca}" }}
egress: {{ allow_hosts: ["*"], allow_loopback: true, allow_private: true }}
timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 5s, idle: 10s, drain: 5s }}
runs: {{ budget: 1000 }}
tools:
  - name: pay.charge_https
    match: {{ host: localhost, port: {https_port}, method: POST, path: /v1/charges }}
    effect: money
  - name: pay.charge_http
    match: {{ host: 127.0.0.1, port: {http_port}, method: POST, path: /v1/charges }}
    effect: money
  - name: pay.refund
    match: {{ host: 127.0.0.1, port: {http_port}, method: POST, path: /v1/refunds }}
    effect: money
    policy: deny
"""

# Which URL each guide snippet is run against.
HTTP_SNIPPETS = {"undici-http-absolute", "undici-http-tunnel"}


def blocks(kind):
    """(name, language, code) of every block marked <!-- kind: name -->."""
    with open(GUIDE) as f:
        text = f.read()
    pattern = re.compile(r"<!-- %s: (\S+) -->\n```(\w+)\n(.*?)```" % kind, re.S)
    return [(m.group(1), m.group(2), m.group(3)) for m in pattern.finditer(text)]


class ClientGuideTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.undici = node_modules("undici7", UNDICI_7)
        cls.dir = tempfile.mkdtemp(prefix="idemgate-guide-")
        ca = TestCa(cls.dir)
        cls.https = HttpsProvider(*ca.cert_for("localhost", "DNS:localhost,IP:127.0.0.1")).__enter__()
        cls.http = Provider().__enter__()
        ca_dir = os.path.join(cls.dir, "ca")
        out = subprocess.run([BIN, "ca", "init", "--dir", ca_dir], capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr.decode()
        cls.ca = os.path.join(ca_dir, "ca.pem")
        cls.proxy = Proxy(CONFIG.format(ca_dir=ca_dir, upstream_ca=ca.cert, https_port=cls.https.port,
                                        http_port=cls.http.port)).start()

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        cls.https.__exit__(None, None, None)
        cls.http.__exit__(None, None, None)

    def run_snippet(self, name, language, code, run):
        proxy = "http://%s:x@127.0.0.1:%d" % (run, self.proxy.port)
        url = self.http.url("/v1/charges") if name in HTTP_SNIPPETS else \
            "https://localhost:%d/v1/charges" % self.https.port
        env = dict(CLEAN_ENV, IDEMGATE_PROXY=proxy, IDEMGATE_CA=self.ca, TOOL_URL=url, HTTP_PROXY=proxy,
                   HTTPS_PROXY=proxy, NODE_PATH=self.undici)
        if language == "sh":
            cmd = ["bash", "-c", code]
        elif language == "python":
            # httpx comes from Debian (python3-httpx): the system interpreter.
            cmd = ["/usr/bin/python3" if "httpx" in code else sys.executable, "-c", code]
        elif language == "js":
            cmd = [node(), "-e", code]
        else:
            raise AssertionError("unknown snippet language " + language)
        out = subprocess.run(cmd, capture_output=True, timeout=120, env=env)
        self.assertEqual(out.returncode, 0, "%s: %s" % (name, out.stderr.decode()))
        return out.stdout.decode()

    def test_guide_snippets_are_guarded(self):
        snippets = blocks("guide")
        self.assertGreaterEqual(len(snippets), 7)
        for name, language, code in snippets:
            with self.subTest(name):
                run = "run-guide-" + name
                provider = self.http if name in HTTP_SNIPPETS else self.https
                before = len(provider.effects_snapshot())
                for _ in range(2):
                    self.run_snippet(name, language, code, run)
                self.assertEqual(len(provider.effects_snapshot()) - before, 1, name)
                # The log is written off the network thread: wait for both lines.
                decisions = wait_until(
                    lambda: (lambda d: d if len(d) >= 2 else None)(
                        [e["decision"] for e in self.proxy.log_lines()
                         if e.get("event") == "decision" and e.get("run") == run]), 10, "two decision lines")
                self.assertEqual(decisions[0], "forwarded", (name, decisions))
                self.assertTrue(len(decisions) >= 2 and all(d == "replayed" for d in decisions[1:]),
                                (name, decisions))

    def test_excerpts_are_lines_of_tested_clients(self):
        excerpts = blocks("excerpt")
        self.assertGreaterEqual(len(excerpts), 3)
        for path, _, code in excerpts:
            with self.subTest(path):
                with open(os.path.join(ROOT, path)) as f:
                    lines = {line.strip() for line in f}
                for line in code.splitlines():
                    if line.strip():
                        self.assertIn(line.strip(), lines, "%s: %r" % (path, line))

    def test_openai_node_sdk_raises_on_refusal(self):
        modules = node_modules("openai", OPENAI)
        script = os.path.join(os.path.dirname(__file__), "clients", "openai_calls.js")
        out = subprocess.run([node(), script, "http://run-openai:x@127.0.0.1:%d" % self.proxy.port,
                              "http://127.0.0.1:%d/v1" % self.http.port, json.dumps({"amount": 5, "currency": "eur"}),
                              "/charges", "/charges", "/refunds"],
                             capture_output=True, timeout=120, env=dict(CLEAN_ENV, NODE_PATH=modules))
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        first, second, refused = json.loads(out.stdout)
        self.assertTrue(first["ok"] and second["ok"], (first, second))
        self.assertEqual(first["id"], second["id"])
        self.assertEqual((first["decision"], second["decision"]), ("forwarded", "replayed"))
        self.assertFalse(refused["ok"], refused)
        self.assertTrue(refused["api_error"], refused)
        self.assertEqual(refused["status"], 403)
        self.assertEqual(refused["code"], "policy_deny")
        self.assertIn("Question for a human", refused["message"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
