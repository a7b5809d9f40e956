"""The escalation sweeper looks a query-mode unknown up once in the
background before anyone is asked: a write whose answer was lost while the
provider applied it, and whose agent never comes back, is settled as
completed with its receipt (no escalation); one the provider never applied
is escalated once at its reconcile.ttl. Each intent is looked up at most
once, across sweeper passes and a restart. Both ledgers."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from admin_common import TOKEN, AdminProxy  # noqa: E402
from enforce_common import call, ledger_url, new_run  # noqa: E402
from harness import wait_until  # noqa: E402
from provider import Provider  # noqa: E402
from unknown_common import config, tool  # noqa: E402

# inline: 0s, so that the agent's own request never reconciles: whatever
# settles these intents is the sweeper. bg.order is looked up after settle
# (300ms), inside its ttl; bg.late's settle is longer than its ttl, so it
# is looked up at the ttl, just before it would be escalated.
TOOLS = (("bg.order", "/v1/bgorders", "4s", "300ms"), ("bg.late", "/v1/bglate", "1s", "30s"))


def metric(proxy, name):
    for line in proxy.admin("GET", "/metrics").body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


class BackgroundLookupCases:
    BACKEND = "sqlite"

    def setUp(self):
        self.provider = Provider().__enter__()
        self.addCleanup(self.provider.__exit__, None, None, None)
        self.dir = tempfile.mkdtemp(prefix="idemgate-lookup-")
        self.proxy = self.start_proxy()
        self.run_id = new_run()

    def start_proxy(self):
        port = self.provider.port
        tools = [tool(name, path, port, mode="query", ttl=ttl, settle=settle, inline="0s")
                 for name, path, ttl, settle in TOOLS]
        token_file = os.path.join(self.dir, "admin.token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        text = config(ledger_url(self.BACKEND, self.dir), tools) + \
            "admin:\n  listen: 127.0.0.1:0\n  token_file: %s\n" % token_file
        proxy = AdminProxy(text, self.dir)
        proxy.start()
        self.addCleanup(proxy.stop)
        return proxy

    def write(self, path, customer):
        """One write whose outcome becomes unknown; the agent never retries."""
        answer = call(self.proxy, "POST", self.provider.url(path), {"amount": 700, "currency": "eur",
                                                                     "customer": customer}, run=self.run_id)
        self.assertEqual(answer.status, 409, answer.body)
        self.assertEqual(answer.header("idemgate-decision"), "wait")
        [key] = [w[5] for w in self.provider.writes(path) if json.loads(w[4])["customer"] == customer]
        return key

    def intent(self, key):
        [intent] = self.proxy.admin_json("GET", "/api/intents?key=" + key)["intents"]
        return intent

    def escalations(self, intent_id):
        items = self.proxy.admin_json("GET", "/api/escalations?limit=1000")["escalations"]
        return [e for e in items if e.get("intent_id") == intent_id]

    def assert_not_escalated(self, intent_id):
        found = self.escalations(intent_id)
        if self.BACKEND == "postgresql":
            # Other tests' processes share this PostgreSQL, and their sweepers
            # do not know bg.late is looked up first: one of them may escalate
            # it at its ttl; then the lookup's settlement closed it.
            found = [e for e in found if not (e["state"] == "completed" and e["resolved_by"] == "idemgate")]
        self.assertEqual(found, [])

    def searches_for(self, key):
        return [s for s in self.provider.searches() if s[2].endswith("key=" + key)]

    def test_found_settles_not_found_escalates_once(self):
        self.provider.script("commit_then_drop")  # applied, answer lost
        found_key = self.write("/v1/bgorders", "cus_found")
        self.provider.script("drop_before")  # never applied, answer lost
        missing_key = self.write("/v1/bgorders", "cus_missing")
        self.provider.script("commit_then_drop")
        late_key = self.write("/v1/bglate", "cus_late")

        # Applied: settled as completed with the provider's id, inside the ttl.
        effect = {e["key"]: e for e in self.provider.effects_snapshot()}
        done = wait_until(lambda: self.intent(found_key)["state"] == "completed" and self.intent(found_key), 10,
                          "the sweeper's lookup to settle the applied write")
        self.assertEqual(done["receipt"], effect[found_key]["id"])
        late = wait_until(lambda: self.intent(late_key)["state"] == "completed" and self.intent(late_key), 10,
                          "the lookup at the ttl to settle the other applied write")
        self.assertEqual(late["receipt"], effect[late_key]["id"])

        # Not applied: one escalation at the ttl, made by the sweeper.
        missing = self.intent(missing_key)
        [esc] = wait_until(lambda: self.escalations(missing["id"]), 15, "the escalation of the missing write")
        self.assertEqual(esc["reason_code"], "money_unknown")
        self.assertEqual(esc["package"]["escalated_by"], "sweeper")
        self.assertEqual(self.intent(missing_key)["state"], "unknown")
        # Its ttl is past, and that of the earlier write too: neither settled
        # write was escalated.
        self.assert_not_escalated(done["id"])
        self.assert_not_escalated(late["id"])

        # More passes, then another process on the same ledger: nothing is
        # looked up twice and nothing is escalated twice.
        logged = {line["intent"]: line["outcome"] for line in self.proxy.log_lines()
                  if line.get("event") == "looked_up_unknown"}
        self.assertEqual(logged, {done["id"]: "found", late["id"]: "found", missing["id"]: "not_found"})
        passes = metric(self.proxy, "idemgate_sweeper_passes_total")
        wait_until(lambda: metric(self.proxy, "idemgate_sweeper_passes_total") >= passes + 3, 30, "three more sweeps")
        self.assertEqual(metric(self.proxy, "idemgate_sweeper_settled_total"), 2)
        self.proxy.stop()
        self.proxy = self.start_proxy()
        wait_until(lambda: metric(self.proxy, "idemgate_sweeper_passes_total") >= 3, 30, "the restarted sweeper")
        for key in (found_key, missing_key, late_key):
            self.assertEqual(len(self.searches_for(key)), 1, key)
        self.assertEqual(len(self.escalations(missing["id"])), 1)
        self.assert_not_escalated(done["id"])
        self.assert_not_escalated(late["id"])
        self.assertEqual(metric(self.proxy, "idemgate_sweeper_settled_total"), 0)

        # Each write reached the provider once, and the agent coming back
        # now gets the settled answer replayed, with nothing re-sent.
        self.assertEqual(len(self.provider.writes("/v1/bgorders")), 2)
        self.assertEqual(len(self.provider.writes("/v1/bglate")), 1)
        again = call(self.proxy, "POST", self.provider.url("/v1/bgorders"),
                     {"amount": 700, "currency": "eur", "customer": "cus_found"}, run=self.run_id)
        self.assertEqual(again.status, 200, again.body)
        self.assertEqual(again.header("idempotent-replayed"), "true")
        self.assertEqual(again.json()["id"], effect[found_key]["id"])
        self.assertEqual(len(self.provider.writes("/v1/bgorders")), 2)


class SqliteBackgroundLookup(BackgroundLookupCases, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresBackgroundLookup(BackgroundLookupCases, unittest.TestCase):
    BACKEND = "postgresql"


if __name__ == "__main__":
    unittest.main()
