"""stripe-node (npm) and stripe-python (Debian's python3-stripe) through
idemgate's HTTPS interception against a local Stripe-like HTTPS provider.
Both SDKs raise only when the JSON body has an `error` member: every refusal
must make charges.create throw a StripeError whose code is the reason_code
(never a charge object with no id), while a normal charge and its replay
resolve. One set of cases, run once per SDK."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN, Proxy  # noqa: E402
from node_deps import CLEAN_ENV, STRIPE, node_modules, run_node  # noqa: E402
from tls_upstream import HttpsProvider, TestCa  # noqa: E402

CLIENTS = os.path.join(os.path.dirname(__file__), "clients")
# Debian's python3-stripe is installed for the system interpreter.
SYSTEM_PYTHON = "/usr/bin/python3"

CONFIG = """\
listen: 127.0.0.1:0
threads: 2
ledger: {{ url: "sqlite:./ledger.db" }}
tls: {{ intercept: true, ca_cert: "{ca_dir}/ca.pem", ca_key: "{ca_dir}/ca.key", upstream_ca_file: "{upstream_ca}" }}
egress: {{ allow_hosts: ["*"], allow_loopback: true }}
timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 5s, idle: 10s, drain: 5s }}
tools:
  - name: stripe.create_charge
    match: {{ host: localhost, port: {port}, method: POST, path: /v1/charges }}
    effect: money
    idempotency: {{ header: Idempotency-Key, mode: inject }}
    retry: {{ bound: 1 }}
    reconcile: {{ mode: none }}
    receipt: /id
  - name: wrong.create_charge
    match: {{ host: localhost, port: {wrong_port}, method: POST, path: /v1/charges }}
    effect: money
"""


def charge(customer):
    return json.dumps({"amount": 1000, "currency": "eur", "customer": customer})


class StripeCases:
    """The cases; a subclass says how its SDK is run (stripe())."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="idemgate-stripe-")
        ca = TestCa(cls.dir)
        cls.upstream_ca = ca.cert
        cls.good = ca.cert_for("localhost", "DNS:localhost,IP:127.0.0.1")
        cls.wrong_cert = ca.cert_for("wrong.test", "DNS:wrong.test")
        cls.ca_dir = os.path.join(cls.dir, "idemgate-ca")
        out = subprocess.run([BIN, "ca", "init", "--dir", cls.ca_dir], capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr.decode()

    def setUp(self):
        self.provider = HttpsProvider(*self.good).__enter__()
        self.addCleanup(self.provider.__exit__, None, None, None)
        self.wrong = HttpsProvider(*self.wrong_cert).__enter__()
        self.addCleanup(self.wrong.__exit__, None, None, None)
        cfg = CONFIG.format(ca_dir=self.ca_dir, upstream_ca=self.upstream_ca, port=self.provider.port,
                            wrong_port=self.wrong.port)
        self.proxy = Proxy(cfg).start()
        self.addCleanup(self.proxy.stop)

    def proxy_url(self, run):
        return "http://%s:x@127.0.0.1:%d" % (run, self.proxy.port)

    def assert_raised(self, result, reason_code, status):
        self.assertFalse(result["ok"], "a refusal was taken for a charge: %r" % result)
        self.assertTrue(result["stripe_error"], result)
        self.assertEqual(result["code"], reason_code, result)
        self.assertEqual(result["status"], status, result)
        self.assertTrue(result["message"], result)  # error.message, what stripe-node shows

    def test_charge_and_replay_resolve(self):
        first, second = self.stripe("run-ok", [charge("cus_ok"), charge("cus_ok")])
        self.assertTrue(first["ok"] and second["ok"], (first, second))
        self.assertTrue(first["id"].startswith("ch_"), first)
        self.assertEqual(second["id"], first["id"])
        self.assertEqual(first["decision"], "forwarded")
        self.assertEqual(second["decision"], "replayed")
        self.assertEqual(len(self.provider.effects_snapshot()), 1)

    def test_run_frozen_after_401_raises(self):
        self.provider.script("status", 401)
        auth, frozen = self.stripe("run-frozen", [charge("cus_a"), charge("cus_b")])
        self.assertEqual(auth["class"], self.AUTH_ERROR, auth)  # the provider's own 401
        self.assert_raised(frozen, "run_frozen", 403)
        self.assertEqual(frozen["raw_type"], "idemgate_refusal")
        self.assertEqual(frozen["class"], self.PERMISSION_ERROR)
        self.assertIn("Question for a human", frozen["message"])
        self.assertEqual(len(self.provider.writes()), 1)

    def test_retry_exhausted_raises(self):
        for _ in range(2):
            self.provider.script("status", 503)
        # The SDK retries the 503s itself; idemgate stops it at the bound.
        (result,) = self.stripe("run-exhausted", [charge("cus_x")], retries=3)
        self.assert_raised(result, "tool_retry_exhausted", 422)
        self.assertIn("Attempts: 2/2", result["message"])
        self.assertEqual(len(self.provider.writes()), 2)

    def test_money_unknown_raises(self):
        self.provider.script("commit_then_drop")
        (result,) = self.stripe("run-unknown", [charge("cus_u")], retries=2)
        self.assert_raised(result, "money_unknown", 422)
        self.assertIn("Idempotency key: ", result["message"])
        self.assertEqual(len(self.provider.effects_snapshot()), 1)

    def test_upstream_tls_failed_raises(self):
        (result,) = self.stripe("run-tls", [charge("cus_t")], port=self.wrong.port)
        self.assert_raised(result, "upstream_tls_failed", 502)
        self.assertIn("wrong.test", result["message"])
        self.assertEqual(self.wrong.requests, [])


class StripeNodeTest(StripeCases, unittest.TestCase):
    AUTH_ERROR = "StripeAuthenticationError"
    PERMISSION_ERROR = "StripePermissionError"

    @classmethod
    def setUpClass(cls):
        cls.modules = node_modules("stripe", STRIPE)
        super().setUpClass()

    def stripe(self, run, charges, retries=0, port=None):
        out = run_node(os.path.join(CLIENTS, "stripe_charges.js"),
                       [self.proxy_url(run), str(port or self.provider.port), str(retries)] + charges, self.modules,
                       env={"NODE_EXTRA_CA_CERTS": os.path.join(self.ca_dir, "ca.pem")})
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        return json.loads(out.stdout)


class StripePythonTest(StripeCases, unittest.TestCase):
    AUTH_ERROR = "AuthenticationError"
    PERMISSION_ERROR = "PermissionError"

    @classmethod
    def setUpClass(cls):
        probe = subprocess.run([SYSTEM_PYTHON, "-c", "import stripe"], capture_output=True, timeout=60)
        assert probe.returncode == 0, "python3-stripe is not installed (scripts/packages.txt): " + probe.stderr.decode()
        super().setUpClass()

    def stripe(self, run, charges, retries=0, port=None):
        args = [SYSTEM_PYTHON, os.path.join(CLIENTS, "stripe_charges.py"), self.proxy_url(run),
                str(port or self.provider.port), str(retries), os.path.join(self.ca_dir, "ca.pem")] + charges
        out = subprocess.run(args, capture_output=True, timeout=120, env=CLEAN_ENV)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        return json.loads(out.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
