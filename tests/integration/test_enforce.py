"""Enforcement on the wire (SPEC section 2 and 4), one test per golden
fixture of seeds/retry-or-escalate.txt plus replay, concurrency and money
cases. Each runs on both ledger backends against a provider simulator that
counts every effect and every key."""
import json
import os
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from enforce_common import Backends, escalations, ops  # noqa: E402
from harness import BIN, wait_until  # noqa: E402

CHARGE = {"amount": 1000, "currency": "eur", "customer": "cus_1"}


class RefusalAssertions:
    def assert_refused(self, answer, reason, status=None):
        self.assertEqual(answer.header("content-type"), "application/problem+json", answer.body)
        problem = answer.json()
        self.assertEqual(problem["reason_code"], reason, problem)
        if status:
            self.assertEqual(answer.status, status)
        self.assertEqual(answer.header("idemgate-decision"), "refused")
        return problem


class EnforcementCases(RefusalAssertions):

    # auth-401-write: Write tool returns 401 -> escalate tool_auth_error;
    # fail if any second execute of that tool.
    def test_auth_401_write(self):
        self.provider.script("status", 401)
        first = self.call("POST", "/v1/charges", CHARGE)
        self.assertEqual(first.status, 401)
        self.assertEqual(first.header("idemgate-class"), "auth")
        again = self.call("POST", "/v1/charges", CHARGE)
        self.assert_refused(again, "run_frozen", 403)
        other = self.call("POST", "/v1/tickets", {"title": "x"})
        self.assert_refused(other, "run_frozen", 403)
        read = self.call("GET", "/v1/items/1")  # reads are not frozen
        self.assertEqual(read.status, 200)
        self.assertEqual(len(self.provider.writes()), 1)
        self.assertEqual(len(self.provider.writes("/v1/tickets")), 0)
        packages = [e for e in escalations(self.proxy) if e["run"] == self.run_id]
        self.assertTrue(any(e["reason_code"] == "run_frozen" for e in packages), packages)
        # An operator unfreezes the run; the same charge is still a known auth
        # denial and is refused, a new write goes through.
        out = subprocess.run([BIN, "runs", "unfreeze", self.run_id, "--config", self.proxy.config_path],
                             capture_output=True, cwd=self.proxy.dir, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assert_refused(self.call("POST", "/v1/charges", CHARGE), "tool_auth_error")
        self.assertEqual(self.call("POST", "/v1/tickets", {"title": "x"}).status, 200)
        self.assertEqual(len(self.provider.writes()), 1)

    # policy-deny-refund: the gate denies issue_refund; fail if refund HTTP happens.
    def test_policy_deny_refund(self):
        answer = self.call("POST", "/v1/refunds", {"charge": "ch_1"})
        problem = self.assert_refused(answer, "policy_deny", 403)
        for member in ("terminal", "question_for_human", "tool", "run", "fingerprint", "attempts", "bound",
                       "tools_tried", "trace_id"):
            self.assertIn(member, problem)
        self.assertEqual(problem["tool"], "pay.refund")
        self.assertEqual(answer.header("stripe-should-retry"), "false")
        self.assertEqual(len(self.provider.writes("/v1/refunds")), 0)
        packages = [e for e in escalations(self.proxy) if e["run"] == self.run_id]
        self.assertTrue(any(e["reason_code"] == "policy_deny" for e in packages), packages)

    # retry-429-then-ok: first read 429, second 200; fail on an immediate re-call with no wait.
    def test_retry_429_then_ok(self):
        self.provider.script("status", 429, {"Retry-After": "1"})
        first = self.call("GET", "/v1/items/42")
        self.assertEqual(first.status, 429)
        self.assertEqual(first.header("idemgate-class"), "rate_limited")
        second = self.call("GET", "/v1/items/42")
        self.assertEqual(second.status, 200)
        self.assertEqual(second.header("idemgate-decision"), "held")
        gets = [r for r in self.provider.requests if r[1] == "GET"]
        self.assertEqual(len(gets), 2)
        self.assertGreaterEqual(gets[1][0] - gets[0][0], 0.95, "the retry did not wait out Retry-After")

    # timeout-charge-same-key: the provider commits, then the connection drops.
    # The first answer is lost after the provider committed: idemgate re-sends
    # the same key inside the request and the agent gets the real charge
    # (decision reconciled). The agent then retries with no key, a fresh key
    # each time, and a stable key: exactly one effect, one key upstream.
    def test_timeout_charge_same_key(self):
        for variant in ("none", "fresh", "stable"):
            with self.subTest(variant):
                run = self.run_id + "-" + variant
                body = dict(CHARGE, customer="cus_" + variant)
                self.provider.script("commit_then_drop")

                def headers(i):
                    if variant == "fresh":
                        return {"Idempotency-Key": "agent-%s-%d" % (variant, i)}
                    if variant == "stable":
                        return {"Idempotency-Key": "agent-stable"}
                    return {}

                first = self.call("POST", "/v1/charges", body, headers(0), run=run)
                self.assertEqual(first.status, 200, first.body)
                self.assertEqual(first.header("idemgate-decision"), "reconciled")
                key = first.header("idemgate-key")
                self.assertTrue(key)
                for i in range(1, 4):
                    again = self.call("POST", "/v1/charges", body, headers(i), run=run)
                    self.assertEqual(again.status, 200, again.body)
                    self.assertEqual(again.header("idemgate-key"), key)
                effects = [e for e in self.provider.effects_snapshot() if "cus_" + variant in e["body"]]
                self.assertEqual(len(effects), 1, effects)
                keys = {r[5] for r in self.provider.writes() if b"cus_" + variant.encode() in r[4]}
                self.assertEqual(keys, {key}, "the provider saw more than one key for one intent")

    # same-fingerprint-3x: identical args, retryable 5xx -> tool_retry_exhausted at the bound.
    def test_same_fingerprint_3x(self):
        for _ in range(3):
            self.provider.script("status", 503)
        answers = [self.call("POST", "/v1/tickets", {"title": "printer on fire"}) for _ in range(4)]
        self.assertEqual([a.status for a in answers[:3]], [503, 503, 503])
        self.assertEqual(answers[0].header("idemgate-attempt"), "1/3")
        self.assertEqual(answers[2].header("idemgate-attempt"), "3/3")
        problem = self.assert_refused(answers[3], "tool_retry_exhausted")
        self.assertNotIn(answers[3].status, (408, 409, 429, 500, 502, 503, 504))
        self.assertEqual(problem["attempts"], 3)
        self.assertEqual(problem["bound"], 2)
        self.assertEqual(len(self.provider.writes("/v1/tickets")), 3)  # bound + 1
        keys = {r[5] for r in self.provider.writes("/v1/tickets")}
        self.assertEqual(len(keys), 1)

    # schema-fail-twice: 422, the model "fixes" it, 422 again -> escalate; fail on a third payload.
    def test_schema_fail_twice(self):
        self.provider.script("status", 422)
        self.provider.script("status", 422)
        a = self.call("POST", "/v1/tickets", {"title": "a"})
        b = self.call("POST", "/v1/tickets", {"title": "b"})
        self.assertEqual((a.status, b.status), (422, 422))
        self.assertEqual(a.header("idemgate-class"), "validation")
        c = self.call("POST", "/v1/tickets", {"title": "c"})
        self.assert_refused(c, "validation_repeated")
        again = self.call("POST", "/v1/tickets", {"title": "a"})
        self.assert_refused(again, "validation_repeated")
        self.assertEqual(len(self.provider.writes("/v1/tickets")), 2)

    def test_replay_after_completion(self):
        first = self.call("POST", "/v1/charges", CHARGE)
        self.assertEqual(first.status, 200)
        self.assertEqual(first.header("idemgate-decision"), "forwarded")
        for _ in range(5):
            again = self.call("POST", "/v1/charges", dict(reversed(list(CHARGE.items()))))  # same JSON, keys reordered
            self.assertEqual(again.status, 200)
            self.assertEqual(again.header("idempotent-replayed"), "true")
            self.assertEqual(again.header("idemgate-decision"), "replayed")
            self.assertEqual(again.json(), first.json())
            self.assertEqual(again.header("idemgate-key"), first.header("idemgate-key"))
        self.assertEqual(len(self.provider.writes()), 1)

    def test_concurrent_identical_requests_one_effect(self):
        results = []
        lock = threading.Lock()

        def one():
            a = self.call("POST", "/v1/charges", dict(CHARGE, customer="cus_concurrent"))
            with lock:
                results.append(a)

        threads = [threading.Thread(target=one) for _ in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(len(results), 50)
        self.assertEqual(len(self.provider.effects_snapshot()), 1)
        for a in results:
            self.assertIn(a.status, (200, 409), a.body)
            if a.status == 409:
                self.assertTrue(a.header("retry-after"))
        self.assertEqual(len(self.provider.writes()), 1)

    def test_402_money_rejected(self):
        self.provider.script("status", 402)
        first = self.call("POST", "/v1/charges", CHARGE)
        self.assertEqual(first.status, 402)
        self.assertEqual(first.header("idemgate-class"), "money_rejected")
        again = self.call("POST", "/v1/charges", CHARGE)
        problem = self.assert_refused(again, "money_rejected")
        self.assertNotIn(again.status, (408, 409, 429, 500, 502, 503, 504))
        self.assertEqual(problem["idempotency_key"], first.header("idemgate-key"))
        self.assertEqual(len(self.provider.writes()), 1)

    def test_stripe_should_retry_false(self):
        self.provider.script("status", 500, {"Stripe-Should-Retry": "false"})
        first = self.call("POST", "/v1/charges", CHARGE)
        self.assertEqual(first.status, 500)
        self.assertNotIn(first.header("idemgate-class"), ("transient", "rate_limited", "ok"))
        again = self.call("POST", "/v1/charges", CHARGE)
        self.assertEqual(again.header("idemgate-decision"), "refused")
        self.assertEqual(again.header("stripe-should-retry"), "false")
        self.assertEqual(len(self.provider.writes()), 1)

    def test_sigkill_after_dispatch_then_retry_reconciles(self):
        self.provider.script("hold")
        result = {}

        def charge():
            try:
                result["answer"] = self.call("POST", "/v1/charges", dict(CHARGE, customer="cus_kill"))
            except Exception as e:  # the proxy dies under this request
                result["error"] = e

        t = threading.Thread(target=charge)
        t.start()
        self.provider.wait_held()
        self.proxy.proc.kill()
        self.proxy.proc.wait(10)
        t.join(30)
        self.provider.release()
        restarted = self.start_proxy(self.proxy.dir)
        # The killed process's attempt is owned by its lease until it runs
        # out: until then the retry is told to wait (409), never re-sent.
        deadline = time.monotonic() + 30
        while True:
            again = self.call("POST", "/v1/charges", dict(CHARGE, customer="cus_kill"), proxy=restarted)
            if again.status != 409 or time.monotonic() > deadline:
                break
            self.assertEqual(again.header("idemgate-decision"), "wait")
            self.assertEqual(again.header("stripe-should-retry"), "true")
            self.assertEqual(len(self.provider.writes()), 1)
        self.assertEqual(again.status, 200, again.body)
        self.assertEqual(again.header("idemgate-decision"), "reconciled")
        self.assertEqual(len(self.provider.effects_snapshot()), 1)
        self.assertEqual(len(self.provider.keys_seen()), 1)


    def test_reconcile_resend_answered_409_stays_unknown(self):
        # The first send lands but its answer is lost; the same-key re-sends
        # are answered "409 key in use" (the provider is still processing it).
        # That settles nothing and spends nothing: idemgate waits them out in
        # the request, then gets the stored charge.
        self.provider.script("commit_then_drop")
        for _ in range(3):  # more 409s than retry.bound allows attempts
            self.provider.script("status", 409)
        body = dict(CHARGE, customer="cus_409")
        first = self.call("POST", "/v1/charges", body)
        self.assertEqual(first.status, 200, first.body)
        self.assertEqual(first.header("idemgate-decision"), "reconciled")
        self.assertEqual(len(self.provider.effects_snapshot()), 1)
        self.assertEqual(len(self.provider.writes()), 5)
        again = self.call("POST", "/v1/charges", body)
        self.assertEqual(again.header("idemgate-decision"), "replayed")
        self.assertEqual(again.body, first.body)

    def test_missing_required_field_is_missing_slot(self):
        answer = self.call("POST", "/v1/charges", {"amount": 5})
        problem = self.assert_refused(answer, "missing_slot", 422)
        self.assertIn("/currency", problem["detail"])
        self.assertEqual(self.provider.writes(), [])

    def test_same_agent_key_different_payload_is_422(self):
        first = self.call("POST", "/v1/charges", CHARGE, {"Idempotency-Key": "agent-key-1"})
        self.assertEqual(first.status, 200)
        other = self.call("POST", "/v1/charges", dict(CHARGE, amount=2000), {"Idempotency-Key": "agent-key-1"})
        self.assert_refused(other, "key_payload_mismatch", 422)
        self.assertEqual(len(self.provider.writes()), 1)

    def test_pending_approval_then_operator_approves(self):
        body = {"amount": 70, "destination": "acct_1"}
        first = self.call("POST", "/v1/payouts", body)
        problem = self.assert_refused(first, "pending_approval", 403)
        self.assertEqual(self.provider.writes("/v1/payouts"), [])
        again = self.call("POST", "/v1/payouts", body)
        self.assert_refused(again, "pending_approval", 403)
        self.assertEqual(self.provider.writes("/v1/payouts"), [])
        ops(self.proxy, "escalations", "resolve", str(problem["escalation_id"]), "approve")
        approved = self.call("POST", "/v1/payouts", body)
        self.assertEqual(approved.status, 200, approved.body)
        self.assertEqual(len(self.provider.writes("/v1/payouts")), 1)

    def test_killed_run_is_refused(self):
        self.assertEqual(self.call("POST", "/v1/tickets", {"title": "before"}).status, 200)
        ops(self.proxy, "runs", "kill", self.run_id)
        self.assert_refused(self.call("POST", "/v1/tickets", {"title": "after"}), "run_killed")
        self.assert_refused(self.call("GET", "/v1/items/1"), "run_killed")
        self.assertEqual(len(self.provider.writes("/v1/tickets")), 1)


class BudgetCases(RefusalAssertions):
    BUDGET = 3

    def test_budget_exhausted(self):
        for i in range(3):
            self.assertEqual(self.call("POST", "/v1/tickets", {"title": "t%d" % i}).status, 200)
        answer = self.call("POST", "/v1/tickets", {"title": "one too many"})
        problem = self.assert_refused(answer, "budget_exhausted")
        self.assertEqual(problem["budget"], 3)
        self.assertEqual(len(self.provider.writes("/v1/tickets")), 3)


class QueryReconcileCases:
    TICKET_RECONCILE = "query"

    def test_query_found(self):
        # The answer is lost; idemgate looks the ticket up inside the request.
        self.provider.script("commit_then_drop")
        first = self.call("POST", "/v1/tickets", {"title": "found"})
        self.assertEqual(first.status, 200, first.body)
        self.assertEqual(first.header("idemgate-decision"), "reconciled")
        self.assertEqual(first.json()["key"], first.header("idemgate-key"))
        self.assertEqual(len(self.provider.writes("/v1/tickets")), 1)
        again = self.call("POST", "/v1/tickets", {"title": "found"})
        self.assertEqual(again.header("idemgate-decision"), "replayed")
        self.assertEqual(again.body, first.body)

    def test_query_not_found_waits_for_settle_then_resends_same_key(self):
        # The provider drops the connection before applying anything.
        # Inside the request: looked up (not found), held until settle (1 s)
        # is over, looked up again, then the same key re-sent.
        self.provider.script("drop_before")
        started = time.monotonic()
        first = self.call("POST", "/v1/tickets", {"title": "lost"})
        self.assertEqual(first.status, 200, first.body)
        self.assertEqual(first.header("idemgate-decision"), "reconciled")
        self.assertGreaterEqual(time.monotonic() - started, 0.9, "re-sent before reconcile.settle was over")
        key = first.header("idemgate-key")
        self.assertEqual({r[5] for r in self.provider.writes("/v1/tickets")}, {key})
        self.assertEqual(len(self.provider.writes("/v1/tickets")), 2)
        self.assertEqual(len(self.provider.effects_snapshot()), 1)


class SqliteOnlyCases:
    """Cases that read or lock the SQLite ledger's file: what is stored is
    the same on both backends, and the PostgreSQL outage has its own test
    (test_enforce_pg_down)."""

    def test_stored_answer_keeps_its_end_to_end_fields_only(self):
        import sqlite3
        # Hop-by-hop fields describe the provider's connection: never stored,
        # never replayed. Content-Type stays even when Connection names it.
        self.provider.script("status", 200, {"Connection": "X-Hop, Content-Type", "X-Hop": "1",
                                             "Keep-Alive": "timeout=5", "X-Request-Id": "req_1"})
        first = self.call("POST", "/v1/charges", dict(CHARGE, customer="cus_stored"))
        self.assertEqual(first.status, 200)
        key = first.header("idemgate-key")

        def stored():
            db = sqlite3.connect(os.path.join(self.proxy.dir, "ledger.db"), timeout=5)
            try:
                row = db.execute("SELECT response_headers FROM intents WHERE idem_key = ?",
                                 (key,)).fetchone()
            finally:
                db.close()
            return json.loads(row[0]) if row and row[0] else None

        headers = wait_until(stored, timeout=10)
        names = [name.lower() for name, _ in headers]
        self.assertIn("content-type", names, headers)
        self.assertIn("x-request-id", names, headers)
        for hop in ("connection", "x-hop", "keep-alive", "transfer-encoding"):
            self.assertNotIn(hop, names, headers)
        again = self.call("POST", "/v1/charges", dict(CHARGE, customer="cus_stored"))
        self.assertEqual(again.header("idemgate-decision"), "replayed")
        self.assertEqual(again.header("x-request-id"), "req_1")
        self.assertEqual(again.header("content-type"), "application/json")
        self.assertIsNone(again.header("x-hop"))

    def test_ledger_busy_gives_503_and_sends_nothing(self):
        import sqlite3
        db = sqlite3.connect(os.path.join(self.proxy.dir, "ledger.db"), timeout=1, isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")
        try:
            answer = self.call("POST", "/v1/charges", dict(CHARGE, customer="cus_locked"))
        finally:
            db.execute("ROLLBACK")
            db.close()
        self.assert_refused(answer, "ledger_unavailable", 503)
        self.assertTrue(answer.header("retry-after"))
        self.assertEqual(len(self.provider.writes()), 0)


class SqliteEnforcement(Backends, EnforcementCases, SqliteOnlyCases, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresEnforcement(Backends, EnforcementCases, unittest.TestCase):
    BACKEND = "postgresql"


class SqliteBudget(BudgetCases, Backends, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresBudget(BudgetCases, Backends, unittest.TestCase):
    BACKEND = "postgresql"


class SqliteQueryReconcile(QueryReconcileCases, Backends, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresQueryReconcile(QueryReconcileCases, Backends, unittest.TestCase):
    BACKEND = "postgresql"


if __name__ == "__main__":
    unittest.main(verbosity=2)
