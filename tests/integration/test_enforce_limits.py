"""A matched write is never forwarded uninspected: a body over
limits.inspect_body gets 413 problem+json and the provider sees nothing.
A malformed JSON body on a matched tool is fingerprinted as raw bytes."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from enforce_common import Backends  # noqa: E402


class InspectLimitTest(Backends, unittest.TestCase):
    BACKEND = "sqlite"

    def test_write_over_inspect_limit_is_413_and_never_sent(self):
        big = {"amount": 1, "currency": "eur", "note": "x" * (2 * 1024 * 1024)}
        answer = self.call("POST", "/v1/charges", big)
        self.assertEqual(answer.status, 413)
        self.assertEqual(answer.header("content-type"), "application/problem+json")
        self.assertEqual(answer.json()["reason_code"], "unclassified_fail_closed")
        self.assertEqual(self.provider.writes(), [])

    def test_malformed_json_is_fingerprinted_as_bytes(self):
        # desk.ticket requires no fields, so the broken body reaches the fingerprint.
        first = self.call("POST", "/v1/tickets", b'{"title": "a", "n": ', {"Content-Type": "application/json"})
        self.assertEqual(first.status, 200)
        again = self.call("POST", "/v1/tickets", b'{"title": "a", "n": ', {"Content-Type": "application/json"})
        self.assertEqual(again.header("idemgate-decision"), "replayed")
        other = self.call("POST", "/v1/tickets", b'{"title": "b", "n": ', {"Content-Type": "application/json"})
        self.assertEqual(other.header("idemgate-decision"), "forwarded")
        self.assertEqual(len(self.provider.effects_snapshot()), 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
