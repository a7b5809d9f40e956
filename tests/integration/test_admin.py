"""The admin API (SPEC section 7) on both ledgers: the bearer token, every
endpoint, and resolving escalations changing what the next agent call gets."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from admin_common import TOKEN, AdminBackends, AdminProxy, admin_config  # noqa: E402
from enforce_common import ledger_url  # noqa: E402
from harness import BIN, wait_until  # noqa: E402

CHARGE = {"amount": 1000, "currency": "eur", "customer": "cus_1"}
PAYOUT = {"amount": 5000, "currency": "eur", "destination": "acct_1"}


class AdminCases:

    def test_token_is_required_everywhere_but_healthz(self):
        p = self.proxy
        self.assertEqual(p.admin("GET", "/healthz", token=None).status, 200)
        for path in ("/api/escalations", "/api/intents?run=x", "/metrics", "/readyz", "/api/runs/x"):
            missing = p.admin("GET", path, token=None)
            self.assertEqual(missing.status, 401, path)
            self.assertEqual(missing.header("content-type"), "application/problem+json")
            self.assertEqual(missing.json()["reason_code"], "unauthorized")
            self.assertIn("Bearer", missing.header("www-authenticate"))
            self.assertEqual(p.admin("GET", path, token=TOKEN + "x").status, 401, path)
            self.assertEqual(p.admin("GET", path, token=TOKEN[:-1]).status, 401, path)
        self.assertEqual(p.admin("POST", "/api/runs/x/kill", {}, token="nope").status, 401)
        # The page without a session is the login form, never the queue.
        page = p.admin("GET", "/", token=None)
        self.assertEqual(page.status, 401)
        self.assertIn(b"Sign in", page.body)
        self.assertEqual(p.admin("GET", "/readyz").json(), {"status": "ready"})

    def test_approve_lets_a_pending_approval_call_through_once(self):
        refused = self.call("POST", "/v1/payouts", PAYOUT)
        self.assertEqual(refused.status, 403)
        self.assertEqual(refused.json()["reason_code"], "pending_approval")
        [esc] = self.open_escalations("pending_approval")
        one = self.proxy.admin_json("GET", "/api/escalations/%d" % esc["id"])
        self.assertEqual(one["package"]["reason_code"], "pending_approval")
        self.assertEqual(one["package"]["run"], self.run_id)
        self.assertEqual(one["package"]["trace_id"], refused.json()["trace_id"])
        self.assertEqual(len(self.provider.writes("/v1/payouts")), 0)

        done = self.proxy.admin_json("POST", "/api/escalations/%d/resolve" % esc["id"], {"action": "approve"})
        self.assertEqual(done["state"], "approved")
        # Only an open escalation can be resolved.
        again = self.proxy.admin("POST", "/api/escalations/%d/resolve" % esc["id"], {"action": "deny"})
        self.assertEqual(again.status, 409, again.body)
        self.assertEqual(again.json()["reason_code"], "illegal_transition")

        through = self.call("POST", "/v1/payouts", PAYOUT)
        self.assertEqual(through.status, 200, through.body)
        self.assertEqual(len(self.provider.writes("/v1/payouts")), 1)
        self.assertEqual(self.call("POST", "/v1/payouts", PAYOUT).header("idemgate-decision"), "replayed")
        self.assertEqual(len(self.provider.writes("/v1/payouts")), 1)
        self.assertEqual([e["id"] for e in self.proxy.admin_json("GET", "/api/escalations?state=resolved")["escalations"]
                          if e["run"] == self.run_id], [esc["id"]])

    def test_deny_refuses_for_good(self):
        self.call("POST", "/v1/payouts", PAYOUT)
        [esc] = self.open_escalations("pending_approval")
        done = self.proxy.admin_json("POST", "/api/escalations/%d/resolve" % esc["id"],
                                     {"action": "deny", "note": "not this one"})
        self.assertEqual(done["state"], "denied")
        self.assertEqual(done["note"], "not this one")
        for _ in range(2):
            answer = self.call("POST", "/v1/payouts", PAYOUT)
            self.assertEqual(answer.status, 403, answer.body)
            self.assertEqual(answer.header("idemgate-decision"), "refused")
        self.assertEqual(len(self.provider.writes("/v1/payouts")), 0)
        intent = self.proxy.admin_json("GET", "/api/intents/%d" % esc["intent_id"])
        self.assertEqual(intent["state"], "denied")

    def test_complete_records_the_receipt_and_the_intent_replays_it(self):
        self.call("POST", "/v1/payouts", PAYOUT)
        [esc] = self.open_escalations("pending_approval")
        missing = self.proxy.admin("POST", "/api/escalations/%d/resolve" % esc["id"], {"action": "complete"})
        self.assertEqual(missing.status, 400)
        self.assertEqual(missing.json()["reason_code"], "invalid_argument")
        done = self.proxy.admin_json("POST", "/api/escalations/%d/resolve" % esc["id"],
                                     {"action": "complete", "receipt": "po_manual_1"})
        self.assertEqual(done["state"], "completed")
        answer = self.call("POST", "/v1/payouts", PAYOUT)
        self.assertEqual(answer.header("idemgate-decision"), "replayed", answer.body)
        self.assertIn(b"po_manual_1", answer.body)
        self.assertEqual(len(self.provider.writes("/v1/payouts")), 0)
        intent = self.proxy.admin_json("GET", "/api/intents/%d" % esc["intent_id"])
        self.assertEqual((intent["state"], intent["receipt"]), ("completed", "po_manual_1"))

    def test_intents_by_run_key_and_id(self):
        ok = self.call("POST", "/v1/charges", CHARGE)
        self.assertEqual(ok.status, 200)
        key = ok.header("idemgate-key")
        # The outcome is recorded right after the answer, off the agent's
        # path: the ledger says "completed" shortly after, not at once.
        by_run = wait_until(
            lambda: [i for i in self.proxy.admin_json("GET", "/api/intents?run=" + self.run_id)["intents"]
                     if i["state"] != "dispatched"],
            what="the charge's outcome in the ledger")
        self.assertEqual([(i["tool"], i["state"], i["key"]) for i in by_run], [("pay.charge", "completed", key)])
        by_key = self.proxy.admin_json("GET", "/api/intents?key=" + key)["intents"]
        self.assertEqual([i["id"] for i in by_key], [by_run[0]["id"]])
        one = self.proxy.admin_json("GET", "/api/intents/%d" % by_run[0]["id"])
        self.assertEqual(one["receipt"], self.provider.effects_snapshot()[0]["id"])
        self.assertEqual(self.proxy.admin("GET", "/api/intents/999999999").status, 404)
        self.assertEqual(self.proxy.admin("GET", "/api/intents?key=no-such-key").status, 404)
        self.assertEqual(self.proxy.admin("GET", "/api/intents").status, 400)
        self.assertEqual(self.proxy.admin("GET", "/api/escalations?state=bogus").status, 400)
        self.assertEqual(self.proxy.admin("GET", "/api/nothing").status, 404)
        self.assertEqual(self.proxy.admin("DELETE", "/api/escalations").status, 405)

    def test_kill_and_unfreeze_a_run(self):
        self.provider.script("status", 401)
        self.assertEqual(self.call("POST", "/v1/charges", CHARGE).status, 401)
        frozen = self.proxy.admin_json("GET", "/api/runs/" + self.run_id)
        self.assertEqual(frozen["state"], "frozen")
        self.assertEqual(self.call("POST", "/v1/tickets", {"title": "x"}).json()["reason_code"], "run_frozen")
        self.assertEqual(self.proxy.admin_json("POST", "/api/runs/%s/unfreeze" % self.run_id)["state"], "active")
        self.assertEqual(self.call("POST", "/v1/tickets", {"title": "x"}).status, 200)
        killed = self.proxy.admin_json("POST", "/api/runs/%s/kill" % self.run_id, {"reason": "runaway agent"})
        self.assertEqual((killed["state"], killed["reason"]), ("killed", "runaway agent"))
        self.assertEqual(self.call("GET", "/v1/items/1").json()["reason_code"], "run_killed")
        self.assertEqual(self.proxy.admin("POST", "/api/runs/%s/unfreeze" % self.run_id).status, 409)
        self.assertEqual(self.proxy.admin("POST", "/api/runs/never-seen/kill").status, 404)

    def test_cli_and_api_agree(self):
        self.call("POST", "/v1/payouts", PAYOUT)
        [esc] = self.open_escalations("pending_approval")
        out = subprocess.run([BIN, "escalations", "list", "--state", "open", "--config", self.proxy.config_path],
                             capture_output=True, cwd=self.proxy.dir, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        import json
        from_cli = [json.loads(line) for line in out.stdout.decode().splitlines()]
        self.assertIn(esc, [e for e in from_cli if e["id"] == esc["id"]])
        out = subprocess.run([BIN, "escalations", "resolve", str(esc["id"]), "complete", "--config",
                              self.proxy.config_path], capture_output=True, cwd=self.proxy.dir, timeout=60)
        self.assertEqual(out.returncode, 2)
        self.assertIn(b"receipt", out.stderr)


class SqliteAdmin(AdminBackends, AdminCases, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresAdmin(AdminBackends, AdminCases, unittest.TestCase):
    BACKEND = "postgresql"


class AdminStartup(unittest.TestCase):

    def start(self, **kw):
        d = tempfile.mkdtemp(prefix="idemgate-admin-")
        cfg = admin_config(9, ledger_url("sqlite", d), d, **kw)
        proxy = AdminProxy(cfg, d)
        return proxy

    def test_non_loopback_without_token_refuses_to_start(self):
        proxy = self.start(token=False, listen="0.0.0.0:0")
        with self.assertRaises(AssertionError) as raised:
            proxy.start()
        self.assertIn("not a loopback address", str(raised.exception))
        self.assertIn("admin.token_file", str(raised.exception))
        self.assertEqual(proxy.proc.wait(30), 1)

    def test_loopback_without_token_serves_loopback_hosts_only(self):
        proxy = self.start(token=False)
        proxy.start()
        self.addCleanup(proxy.stop)
        self.assertEqual(proxy.admin("GET", "/api/escalations", token=None).status, 200)
        rebound = proxy.admin("GET", "/api/escalations", token=None, headers={"Host": "evil.example:80"})
        self.assertEqual(rebound.status, 403)
        self.assertEqual(rebound.json()["reason_code"], "host_not_allowed")
        # A cross-site form cannot send JSON: a non-JSON POST is refused.
        form = proxy.admin("POST", "/api/runs/r/kill", b"reason=x", token=None,
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(form.status, 403)

    def test_an_empty_token_file_refuses_to_start(self):
        proxy = self.start()
        with open(os.path.join(proxy.dir, "admin.token"), "w"):
            pass
        with self.assertRaises(AssertionError) as raised:
            proxy.start()
        self.assertIn("is empty", str(raised.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
