"""stripe-node (npm `stripe`) through idemgate's HTTPS interception: the
agent's CONNECT goes to idemgate (https-proxy-agent), idemgate terminates TLS
with its own CA (NODE_EXTRA_CA_CERTS) and talks verified TLS to the provider.
The provider makes the charge, then drops the connection: idemgate
reconciles with the same key inside the request, and `charges.create`
resolves with the real charge id, one effect. Both packages are installed
with npm on first use into the build tree (node_deps); no npm is a failure."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN, Proxy  # noqa: E402
from node_deps import CLEAN_ENV, STRIPE, node, node_modules  # noqa: E402
from tls_upstream import HttpsProvider, TestCa  # noqa: E402

CONFIG = """\
listen: 127.0.0.1:0
threads: 2
ledger: {{ url: "sqlite:./ledger.db" }}
tls: {{ intercept: true, ca_cert: "{ca_dir}/ca.pem", ca_key: "{ca_dir}/ca.key", upstream_ca_file: "{upstream_ca}" }}
egress: {{ allow_hosts: ["*"], allow_loopback: true, allow_private: false }}
timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 5s, idle: 10s, drain: 5s }}
runs: {{ budget: 1000 }}
tools:
  - name: stripe.create_charge
    match: {{ host: localhost, port: {port}, method: POST, path: /v1/charges }}
    effect: money
    idempotency: {{ header: Idempotency-Key, mode: inject }}
    retry: {{ bound: 2 }}
    reconcile: {{ mode: same_key, ttl: 15m, inline: 8s }}
    receipt: /id
"""

CLIENT = r"""
const Stripe = require('stripe');
const { HttpsProxyAgent } = require('https-proxy-agent');
const [proxy, port] = process.argv.slice(1);
const stripe = Stripe('sk_test_idemgate', {
  host: 'localhost', port: Number(port), protocol: 'https', maxNetworkRetries: 0, timeout: 30000,
  httpAgent: new HttpsProxyAgent(proxy),
});
stripe.charges.create({ amount: 2000, currency: 'eur', source: 'tok_visa' })
  .then((charge) => {
    const r = charge.lastResponse || {};
    console.log(JSON.stringify({ id: charge.id, status: r.statusCode, headers: r.headers }));
  })
  .catch((e) => {
    console.error(JSON.stringify({ type: e.type, statusCode: e.statusCode, message: e.message,
                                   headers: e.headers }));
    process.exit(1);
  });
"""

class StripeNodeTest(unittest.TestCase):
    def test_charges_create_resolves_with_the_real_charge_after_a_drop(self):
        node_bin = node()
        modules = node_modules("stripe", STRIPE)
        directory = tempfile.mkdtemp(prefix="idemgate-stripe-")
        test_ca = TestCa(directory)
        ca_dir = os.path.join(directory, "idemgate-ca")
        out = subprocess.run([BIN, "ca", "init", "--dir", ca_dir], capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        with HttpsProvider(*test_ca.cert_for("localhost", "DNS:localhost,IP:127.0.0.1")) as provider:
            proxy = Proxy(CONFIG.format(ca_dir=ca_dir, upstream_ca=test_ca.cert, port=provider.port)).start()
            self.addCleanup(proxy.stop)
            provider.script("commit_then_drop")
            env = dict(CLEAN_ENV, NODE_EXTRA_CA_CERTS=os.path.join(ca_dir, "ca.pem"), NODE_PATH=modules)
            out = subprocess.run([node_bin, "-e", CLIENT, "http://run-stripe:x@127.0.0.1:%d" % proxy.port,
                                  str(provider.port)], capture_output=True, timeout=120, env=env)
            self.assertEqual(out.returncode, 0, "charges.create failed: " + out.stderr.decode())
            result = json.loads(out.stdout)
            self.assertEqual(result["status"], 200, result)
            effects = provider.effects_snapshot()
            self.assertEqual(len(effects), 1, effects)
            self.assertEqual(result.get("id"), effects[0]["id"], result)
            self.assertEqual(result["headers"].get("idemgate-decision"), "reconciled")
            self.assertEqual(len(provider.keys_seen()), 1)
            self.assertIn(b"amount=2000", provider.writes()[0][4])


if __name__ == "__main__":
    unittest.main(verbosity=2)
