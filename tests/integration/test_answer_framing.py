"""The answer to a matched (guarded) request, on the wire: its framing is
idemgate's own (a HEAD's answer keeps the upstream's length and has no body,
a 204 has no length) and an upstream's own Idemgate-* headers never reach
the agent. The upstream sends exactly the bytes each test names."""
import http.client
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BASE_CONFIG, Proxy  # noqa: E402
from upstream import PiecemealUpstream  # noqa: E402


class AnswerFramingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.upstream = PiecemealUpstream()
        config = BASE_CONFIG + """tools:
  - name: things.read
    match: {{ host: 127.0.0.1, port: {port}, path: "/things/{{id}}" }}
    effect: read
""".format(port=cls.upstream.port)
        cls.proxy = Proxy(config).start()

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        cls.upstream.close()

    def request(self, method, answer):
        self.upstream.pieces = [answer]
        conn = http.client.HTTPConnection("127.0.0.1", self.proxy.port, timeout=10)
        try:
            conn.request(method, "http://127.0.0.1:%d/things/1" % self.upstream.port)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def test_head_keeps_the_upstreams_length(self):
        status, headers, body = self.request(
            "HEAD", b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1234\r\n\r\n")
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("idemgate-decision"), "forwarded", headers)
        self.assertEqual(headers.get("content-length"), "1234", headers)
        self.assertEqual(body, b"")
        # The same answer to a GET would carry its body: the connection
        # still frames the next exchange right.
        status, headers, body = self.request(
            "GET", b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        self.assertEqual((status, headers.get("content-length"), body), (200, "2", b"{}"))

    def test_204_has_no_length(self):
        status, headers, body = self.request("GET", b"HTTP/1.1 204 No Content\r\nX-Id: 7\r\nContent-Length: 0\r\n\r\n")
        self.assertEqual(status, 204)
        self.assertEqual(headers.get("x-id"), "7")
        self.assertNotIn("content-length", headers)
        self.assertEqual(body, b"")

    def test_upstream_idemgate_headers_do_not_reach_the_agent(self):
        status, headers, body = self.request(
            "GET", b"HTTP/1.1 200 OK\r\nIdemgate-Key: spoofed\r\nIdemgate-Decision: replayed\r\n"
                   b"Content-Length: 2\r\n\r\nok")
        self.assertEqual((status, body), (200, b"ok"))
        self.assertNotIn("idemgate-key", headers)  # a read has no key: idemgate sets none
        self.assertEqual(headers.get("idemgate-decision"), "forwarded")


if __name__ == "__main__":
    unittest.main(verbosity=2)
