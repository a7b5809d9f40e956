"""Escalations nobody asked for and the people told about them: the sweeper
escalates an unknown past its reconcile.ttl exactly once (across restarts),
and the notification webhook receives each package, signed with
HMAC-SHA256, retried after a failure, with no secret in it."""
import hashlib
import hmac
import json
import os
import signal
import sys
import threading
import unittest
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.dirname(__file__))
from admin_common import TOKEN, AdminBackends, admin_config  # noqa: E402
from enforce_common import ledger_url  # noqa: E402
from harness import wait_until  # noqa: E402
from upstream import ServerThread  # noqa: E402

CHARGE = {"amount": 1000, "currency": "eur", "customer": "cus_sweep"}
SECRET = "whsec-test-0123456789abcdef"


def metric(proxy, name):
    text = proxy.admin("GET", "/metrics").body.decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


class _Hook(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        hook = self.server.owner
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with hook.lock:
            hook.received.append((dict(self.headers.items()), body))
            fail = hook.fail_first > 0
            if fail:
                hook.fail_first -= 1
            hook.cond.notify_all()
        status = 500 if fail else 204
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


class Hook(ServerThread):
    """A webhook receiver that answers 500 to the first fail_first POSTs."""

    def __init__(self, fail_first=0):
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.received = []
        self.fail_first = fail_first
        super().__init__(_Hook)

    def deliveries(self, escalation_id):
        with self.lock:
            return [(h, b) for h, b in self.received if h.get("Idemgate-Escalation") == str(escalation_id)]


class SweeperCases:
    TTL = "1s"

    def test_an_unknown_past_its_ttl_is_escalated_exactly_once(self):
        # The process dies while the charge is at the provider: on restart
        # the attempt is unknown, and nobody comes back to ask about it.
        self.provider.script("hold")
        failed = []
        agent = threading.Thread(target=lambda: failed.append(self._call_quietly()))
        agent.start()
        self.provider.wait_held()
        self.proxy.stop(sig=signal.SIGKILL)
        self.provider.release()
        agent.join(30)
        proxy = self.start_proxy(self.proxy.dir)

        def escalated():
            found = [e for e in proxy.admin_json("GET", "/api/escalations?limit=1000")["escalations"]
                     if e["run"] == self.run_id]
            return found or None
        [esc] = wait_until(escalated, 30, "the sweeper to escalate the unknown")
        self.assertEqual(esc["reason_code"], "money_unknown")
        package = esc["package"]
        self.assertEqual(package["escalated_by"], "sweeper")
        self.assertEqual(package["terminal"], "escalate")
        self.assertEqual(package["idempotency_key"], list(self.provider.keys_seen())[0])
        self.assertEqual(package["tool"], "pay.charge")
        self.assertIn("question_for_human", package)
        intent = proxy.admin_json("GET", "/api/intents/%d" % esc["intent_id"])
        self.assertEqual(intent["state"], "unknown")
        # More passes, and another process: still one escalation.
        passes = metric(proxy, "idemgate_sweeper_passes_total")
        wait_until(lambda: metric(proxy, "idemgate_sweeper_passes_total") >= passes + 3, 30, "three more sweeps")
        proxy.stop()
        again = self.start_proxy(self.proxy.dir)
        wait_until(lambda: metric(again, "idemgate_sweeper_passes_total") >= 3, 30, "the restarted sweeper")
        found = [e for e in again.admin_json("GET", "/api/escalations?limit=1000")["escalations"]
                 if e["run"] == self.run_id]
        self.assertEqual([e["id"] for e in found], [esc["id"]])
        if self.BACKEND == "sqlite":  # the shared test PostgreSQL holds other tests' unknowns too
            self.assertEqual(metric(again, "idemgate_sweeper_escalations_total"), 0)
        self.assertEqual(len(self.provider.effects_snapshot()), 1)

    def _call_quietly(self):
        try:
            return self.call("POST", "/v1/charges", CHARGE).status
        except OSError as e:
            return str(e)


class SqliteSweeper(SweeperCases, AdminBackends, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresSweeper(SweeperCases, AdminBackends, unittest.TestCase):
    BACKEND = "postgresql"


class WebhookCases:

    def setUp(self):
        self.hook = Hook(fail_first=1).__enter__()
        self.addCleanup(self.hook.__exit__, None, None, None)
        self.NOTIFY = (self.hook.url("/idemgate/escalations?team=payments"), SECRET)
        super().setUp()

    def test_each_package_is_posted_signed_after_a_retry(self):
        refused = self.call("POST", "/v1/payouts", {"amount": 7, "currency": "eur"},
                            headers={"Authorization": "Bearer sk_live_agent_secret"})
        self.assertEqual(refused.json()["reason_code"], "pending_approval")
        [esc] = self.open_escalations("pending_approval")
        # The first POST gets a 500; the retry is delivered.
        deliveries = wait_until(lambda: len(self.hook.deliveries(esc["id"])) >= 2 and self.hook.deliveries(esc["id"]),
                                30, "the webhook to be retried")
        self.assertEqual(len(deliveries), 2)
        for headers, body in deliveries:
            expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            self.assertTrue(hmac.compare_digest(headers["Idemgate-Signature"], expected))
            self.assertEqual(headers["Content-Type"], "application/json")
        self.assertEqual([h["Idemgate-Delivery-Attempt"] for h, _ in deliveries], ["1", "2"])
        self.assertEqual(deliveries[0][1], deliveries[1][1])
        sent = json.loads(deliveries[1][1])
        self.assertEqual(sent["escalation_id"], esc["id"])
        self.assertEqual(sent["reason_code"], "pending_approval")
        self.assertEqual(sent["run"], self.run_id)
        self.assertEqual(sent["package"], esc["package"])
        self.assertEqual(sent["package"]["trace_id"], refused.json()["trace_id"])
        raw = b"".join(b for _, b in self.hook.received)
        for secret in (SECRET, TOKEN, "sk_live_agent_secret"):
            self.assertNotIn(secret.encode(), raw)
        text = self.proxy.admin("GET", "/metrics").body.decode()
        self.assertIn("idemgate_notify_delivered_total 1", text)
        self.assertIn("idemgate_notify_failures_total 1", text)
        # A tampered body does not verify.
        forged = deliveries[1][1].replace(b"pending_approval", b"policy_deny")
        self.assertNotEqual("sha256=" + hmac.new(SECRET.encode(), forged, hashlib.sha256).hexdigest(),
                            deliveries[1][0]["Idemgate-Signature"])

    def test_a_dead_webhook_never_delays_the_agent(self):
        self.hook.__exit__(None, None, None)  # nothing listens there any more
        for i in range(3):
            answer = self.call("POST", "/v1/payouts", {"amount": 100 + i, "currency": "eur"})
            self.assertEqual(answer.json()["reason_code"], "pending_approval")
        self.assertEqual(len(self.open_escalations("pending_approval")), 3)
        wait_until(lambda: metric(self.proxy, "idemgate_notify_failures_total") >= 1, 30, "a failed delivery")


class SqliteWebhook(WebhookCases, AdminBackends, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresWebhook(WebhookCases, AdminBackends, unittest.TestCase):
    BACKEND = "postgresql"


class NotifyConfig(unittest.TestCase):
    def test_a_short_secret_is_a_config_error(self):
        import subprocess
        import tempfile
        from harness import BIN
        d = tempfile.mkdtemp(prefix="idemgate-admin-")
        cfg = admin_config(9, ledger_url("sqlite", d), d, notify=("http://127.0.0.1:9/hook", "short"))
        path = os.path.join(d, "config.yaml")
        with open(path, "w") as f:
            f.write(cfg)
        out = subprocess.run([BIN, "check-config", path], capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 2)
        self.assertRegex(out.stderr.decode(), r"config\.yaml:\d+:\d+: admin.notify needs a secret")



if __name__ == "__main__":
    unittest.main(verbosity=2)
