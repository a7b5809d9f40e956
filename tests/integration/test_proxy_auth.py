"""Proxy authentication (auth: { mode: required, users_file }): users made
with `idemgate auth add-user`, Proxy-Authorization: Basic checked on
absolute-form requests, CONNECT and gateway routes alike, 407 with
Proxy-Authenticate when missing or wrong, the user naming the run. Real
clients: curl and python requests. Also: a non-loopback listener with auth
off warns at start."""
import base64
import json
import os
import stat
import subprocess
import sys
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN, Proxy, wait_until  # noqa: E402
from provider import Provider  # noqa: E402
from upstream import Upstream  # noqa: E402

CLEAN_ENV = {k: v for k, v in os.environ.items()
             if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}

CONFIG = """\
listen: 127.0.0.1:0
threads: 2
ledger: {{ url: "sqlite:./ledger.db" }}
auth: {{ mode: required, users_file: "{users}" }}
egress: {{ allow_hosts: ["*"], allow_loopback: true, allow_private: true }}
timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 5s, idle: 10s, drain: 5s }}
routes:
  - {{ prefix: /up/, upstream: "http://127.0.0.1:{up}/" }}
tools:
  - name: pay.charge
    match: {{ host: 127.0.0.1, port: {pay}, method: POST, path: /v1/charges }}
    effect: money
    receipt: /id
"""

REQUESTS_CLIENT = r"""
import json, sys
import requests
proxy, url = sys.argv[1:3]
out = {}
try:
    r = requests.post(url, json={"amount": 5, "currency": "eur"}, proxies={"http": proxy, "https": proxy}, timeout=30)
    out = {"status": r.status_code, "headers": {k.lower(): v for k, v in r.headers.items()}, "body": r.text}
except requests.exceptions.ProxyError as e:
    out = {"proxy_error": str(e)}
print(json.dumps(out))
"""


def add_user(path, name, password, iterations="20000"):
    return subprocess.run([BIN, "auth", "add-user", path, name, "--iterations", iterations],
                          input=(password + "\n").encode(), capture_output=True, timeout=60)


class ProxyAuthTest(unittest.TestCase):
    def setUp(self):
        self.upstream = Upstream().__enter__()
        self.addCleanup(self.upstream.__exit__, None, None, None)
        self.provider = Provider().__enter__()
        self.addCleanup(self.provider.__exit__, None, None, None)
        self.proxy = Proxy("")
        self.users = os.path.join(self.proxy.dir, "users")
        for name, password in (("alice", "correct horse"), ("bob", "b0b:with:colons")):
            out = add_user(self.users, name, password)
            self.assertEqual(out.returncode, 0, out.stderr)
        with open(self.proxy.config_path, "w") as f:
            f.write(CONFIG.format(users=self.users, up=self.upstream.port, pay=self.provider.port))
        self.proxy.start()
        self.addCleanup(self.proxy.stop)

    def curl(self, *args):
        out = subprocess.run(["curl", "-sS", "--max-time", "30", "-D", "-", "-o", "-", *args],
                             capture_output=True, timeout=60, env=CLEAN_ENV)
        head, _, body = out.stdout.decode(errors="replace").partition("\r\n\r\n")
        return out.returncode, head, body

    def proxy_with(self, user=None, password=None):
        auth = "%s:%s@" % (user, urllib.parse.quote(password, safe="")) if user else ""
        return "http://%s127.0.0.1:%d" % (auth, self.proxy.port)

    def test_users_file_is_private_and_holds_no_password(self):
        mode = stat.S_IMODE(os.stat(self.users).st_mode)
        self.assertEqual(mode, 0o600)
        with open(self.users) as f:
            text = f.read()
        self.assertNotIn("correct horse", text)
        self.assertEqual([line.split(":", 1)[0] for line in text.splitlines()], ["alice", "bob"])
        # The same user again is refused; a bad name too.
        self.assertNotEqual(add_user(self.users, "alice", "x").returncode, 0)
        self.assertNotEqual(add_user(self.users, "a:b", "x").returncode, 0)

    def test_curl_absolute_form(self):
        url = self.upstream.url("/echo")
        code, head, body = self.curl("-x", self.proxy_with(), url)
        self.assertIn(" 407 ", head.splitlines()[0])
        self.assertIn('proxy-authenticate: basic realm="idemgate"', head.lower())
        self.assertEqual(json.loads(body)["reason_code"], "proxy_auth_required")
        code, head, body = self.curl("-x", self.proxy_with("alice", "wrong"), url)
        self.assertIn(" 407 ", head.splitlines()[0])
        code, head, body = self.curl("-x", self.proxy_with("nobody", "correct horse"), url)
        self.assertIn(" 407 ", head.splitlines()[0])
        self.assertEqual(self.upstream.requests, [])

        code, head, body = self.curl("-x", self.proxy_with("alice", "correct horse"), url)
        self.assertIn(" 200 ", head.splitlines()[0], head)
        seen = json.loads(body)
        self.assertFalse(any(k.lower() == "proxy-authorization" for k, _ in seen["headers"]))
        # Many requests of one agent: verified once, then remembered.
        for _ in range(5):
            code, head, body = self.curl("-x", self.proxy_with("bob", "b0b:with:colons"), url)
            self.assertIn(" 200 ", head.splitlines()[0], head)

    def test_curl_connect_tunnel(self):
        url = self.upstream.url("/echo")
        code, head, body = self.curl("-p", "-x", self.proxy_with("alice", "wrong"), url)
        self.assertNotEqual(code, 0)
        self.assertIn("407", head)
        code, head, body = self.curl("-p", "-x", self.proxy_with(), url)
        self.assertIn("407", head)
        self.assertEqual(self.upstream.requests, [])
        code, head, body = self.curl("-p", "-x", self.proxy_with("alice", "correct horse"), url)
        self.assertEqual(code, 0, head)
        self.assertIn(" 200 ", head.splitlines()[0])  # the CONNECT's answer
        self.assertIn(" 200 ", body.splitlines()[0])   # the upstream's, through the tunnel
        self.assertEqual(len(self.upstream.requests), 1)

    def test_gateway_route(self):
        url = "http://127.0.0.1:%d/up/echo" % self.proxy.port
        code, head, body = self.curl(url)
        self.assertIn(" 407 ", head.splitlines()[0])
        token = base64.b64encode(b"alice:correct horse").decode()
        code, head, body = self.curl("-H", "Proxy-Authorization: Basic " + token, url)
        self.assertIn(" 200 ", head.splitlines()[0], head)
        self.assertEqual(json.loads(body)["path"], "/echo")

    def test_python_requests_and_the_run_is_the_user(self):
        url = self.provider.url("/v1/charges")

        def run_client(proxy):
            out = subprocess.run([sys.executable, "-c", REQUESTS_CLIENT, proxy, url],
                                 capture_output=True, timeout=60, env=CLEAN_ENV)
            self.assertEqual(out.returncode, 0, out.stderr)
            return json.loads(out.stdout)

        denied = run_client(self.proxy_with("alice", "nope"))
        self.assertEqual(denied["status"], 407)
        self.assertEqual(denied["headers"]["proxy-authenticate"], 'Basic realm="idemgate"')
        self.assertEqual(len(self.provider.writes()), 0)
        ok = run_client(self.proxy_with("alice", "correct horse"))
        self.assertEqual(ok["status"], 200, ok)
        self.assertEqual(ok["headers"]["idemgate-decision"], "forwarded")
        self.assertEqual(len(self.provider.writes()), 1)
        decisions = [line for line in self.proxy.log_lines() if line.get("event") == "decision"]
        self.assertEqual([d["run"] for d in decisions], ["alice"])


class PublicListenerWarning(unittest.TestCase):
    def test_auth_off_on_a_public_address_warns(self):
        with Proxy("listen: 0.0.0.0:0\nthreads: 1\nledger: { url: \"sqlite:./ledger.db\" }\n") as proxy:
            lines = wait_until(lambda: [line for line in proxy.log_lines()
                                        if line.get("event") == "warning" and "auth" in line.get("detail", "")],
                               10, "the warning")
            self.assertIn("0.0.0.0", lines[0]["detail"])
        with Proxy("listen: 127.0.0.1:0\nthreads: 1\nledger: { url: \"sqlite:./ledger.db\" }\n") as proxy:
            wait_until(lambda: any(line.get("event") == "listening" for line in proxy.log_lines()), 10, "listening")
            self.assertFalse(any(line.get("event") == "warning" for line in proxy.log_lines()))


if __name__ == "__main__":
    unittest.main(verbosity=2)
