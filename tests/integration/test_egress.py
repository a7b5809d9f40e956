"""The egress guard on every upstream connection: the host allow-list before
DNS, then every resolved address (link-local and metadata always refused,
loopback and private ranges only when allowed). A refusal is 403
problem+json egress_denied and nothing reaches the upstream."""
import http.client
import json
import os
import socket
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import Proxy, wait_until  # noqa: E402
from provider import Provider  # noqa: E402
from upstream import Upstream  # noqa: E402

TOOL = """\
tools:
  - name: pay.charge
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /v1/charges }}
    effect: money
    reconcile: {{ mode: same_key, ttl: 15m }}
"""

CONFIG = """\
listen: 127.0.0.1:0
threads: 1
ledger: {{ url: "sqlite:./ledger.db" }}
egress: {{ allow_hosts: {hosts}, allow_loopback: {loopback}, allow_private: {private} }}
timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 2s, idle: 10s, drain: 5s }}
"""


def config(hosts='["*"]', loopback="true", private="true"):
    return CONFIG.format(hosts=hosts, loopback=loopback, private=private)


def get(proxy, url, method="GET"):
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    conn.request(method, url)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, r.getheader("Content-Type"), body


def connect(proxy, authority):
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority.encode(), authority.encode()))
        data = b""
        while True:
            part = s.recv(65536)
            if not part:
                break
            data += part
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


class EgressTest(unittest.TestCase):
    def assert_denied(self, status, content_type, body, *words):
        self.assertEqual(status, 403, body)
        self.assertEqual(content_type, "application/problem+json")
        problem = json.loads(body)
        self.assertEqual(problem["reason_code"], "egress_denied", problem)
        for w in words:
            self.assertIn(w, problem["detail"])
        return problem

    def test_metadata_address_is_denied_even_with_everything_allowed(self):
        with Proxy(config()) as proxy:
            status, ct, body = get(proxy, "http://169.254.169.254/latest/meta-data/")
            self.assert_denied(status, ct, body, "169.254.169.254")
            # No connection was attempted: the refusal comes from the address
            # check, not a connect timeout (which would be 504 after 2s).
            wait_until(lambda: any(e.get("event") == "request" and e.get("reason_code") == "egress_denied"
                                   for e in proxy.log_lines()), 10, "the egress_denied log line")

    def test_ipv6_link_local_is_denied(self):
        with Proxy(config()) as proxy:
            status, ct, body = get(proxy, "http://[fe80::1]/")
            self.assert_denied(status, ct, body)

    def test_loopback_denied_unless_allowed(self):
        with Upstream() as up:
            with Proxy(config(loopback="false")) as proxy:
                status, ct, body = get(proxy, up.url("/echo"))
                self.assert_denied(status, ct, body, "127.0.0.1")
                # A name resolving to loopback is judged by its addresses.
                status, ct, body = get(proxy, "http://localhost:%d/echo" % up.port)
                self.assert_denied(status, ct, body, "localhost resolves to")
                self.assertEqual(len(up.requests), 0)
            with Proxy(config(loopback="true")) as proxy:
                status, _, _ = get(proxy, up.url("/echo"))
                self.assertEqual(status, 200)
                self.assertEqual(len(up.requests), 1)

    def test_host_outside_allow_hosts_is_denied_before_dns(self):
        with Upstream() as up:
            with Proxy(config(hosts='["*.example.com", "localhost"]')) as proxy:
                status, ct, body = get(proxy, up.url("/echo"))  # 127.0.0.1 is not listed
                self.assert_denied(status, ct, body, "127.0.0.1")
                # Never resolved: a name that does not exist is refused the same way.
                status, ct, body = get(proxy, "http://no-such-host.invalid/")
                self.assert_denied(status, ct, body, "no-such-host.invalid")
                self.assertEqual(len(up.requests), 0)
                status, _, _ = get(proxy, "http://localhost:%d/echo" % up.port)
                self.assertEqual(status, 200)
                self.assertEqual(len(up.requests), 1)

    def test_connect_to_denied_host_is_403(self):
        with Upstream() as up:
            with Proxy(config(hosts='["*.example.com"]')) as proxy:
                status, body = connect(proxy, "127.0.0.1:%d" % up.port)
                self.assertEqual(status, 403)
                self.assertEqual(json.loads(body)["reason_code"], "egress_denied")
            with Proxy(config()) as proxy:
                status, body = connect(proxy, "169.254.169.254:443")
                self.assertEqual(status, 403)
                self.assertEqual(json.loads(body)["reason_code"], "egress_denied")

    def test_unmatched_deny_refuses_blind_tunnels(self):
        with Upstream() as up:
            with Proxy(config() + "unmatched: deny\n") as proxy:
                status, body = connect(proxy, "127.0.0.1:%d" % up.port)
                self.assertEqual(status, 403)
                self.assertEqual(json.loads(body)["reason_code"], "policy_deny")

    def test_guarded_write_to_denied_address_is_refused_and_never_sent(self):
        with Provider() as provider:
            with Proxy(config(loopback="false") + TOOL.format(port=provider.port)) as proxy:
                conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
                conn.request("POST", provider.url("/v1/charges"), body=b'{"amount": 1}',
                             headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                problem = self.assert_denied(r.status, r.getheader("Content-Type"), r.read(), "127.0.0.1")
                self.assertEqual(r.getheader("Idemgate-Decision"), "refused")
                self.assertEqual(problem["terminal"], "abort")
                conn.close()
            self.assertEqual(provider.writes(), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
