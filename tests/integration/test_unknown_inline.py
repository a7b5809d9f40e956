"""Unknown outcomes inside one agent request (SPEC sections 2 and 4): after
an attempt whose answer was lost, idemgate itself reconciles by the tool's
contract (same_key re-send, query lookup, settle then re-send) and the agent
gets the provider's real outcome with `Idemgate-Decision: reconciled`. What
cannot be settled now is a wait (409 reconciling / in_flight, 429
retry_after) or, when it never can be, 422 with the escalation package, one
per intent and reason, resolved by idemgate when a later reconciliation
settles the intent (here after an operator turns reconciliation on).
Guarded requests go upstream with Accept-Encoding: identity. Every case
runs on both ledgers against a provider simulator that counts every
effect."""
import json
import os
import signal
import sys
import threading
import time
import unittest

import requests

sys.path.insert(0, os.path.dirname(__file__))
from harness import wait_until  # noqa: E402
from provider import Provider  # noqa: E402
from unknown_common import (CHARGE, Proxy, UnknownAssertions, call, config, ledger_url, new_run,  # noqa: E402
                            ops, retry_until_settled, tool)


class InlineCases(UnknownAssertions):
    """One provider and two idemgates per ledger backend (starting processes
    is the slow part); every test has its own run and its own charge body, and
    counts only what carries it."""

    @classmethod
    def setUpClass(cls):
        cls.provider = Provider(gzip=True).__enter__()
        cls.addClassCleanup(cls.provider.__exit__, None, None, None)
        port = cls.provider.port
        tools = [
            tool("pay.charge", "/v1/charges", port, bound=1, inline="8s"),
            tool("pay.q", "/v1/qcharges", port, mode="query", settle="1s", inline="5s"),
            tool("pay.qh", "/v1/qhcharges", port, mode="query", settle="500ms", inline="5s", honoured=False),
            tool("pay.none", "/v1/ncharges", port, mode="none"),
            tool("pay.wait", "/v1/wcharges", port, mode="query", settle="2s", inline="300ms"),
            tool("pay.flight", "/v1/fcharges", port, inline="500ms"),
            tool("pay.r", "/v1/rcharges", port, bound=2, retry_after="hold", max_retry_after="5s"),
        ]
        # upstream_response 1s makes a slow provider an unknown outcome soon;
        # the long one keeps an attempt in flight while a test looks at it.
        cls.proxy = cls._start(tools, response="1s")
        cls.long_proxy = cls._start(tools, response="10s")

    @classmethod
    def _start(cls, tools, **timeouts):
        proxy = Proxy("")
        with open(proxy.config_path, "w") as f:
            f.write(config(ledger_url(cls.BACKEND, proxy.dir), tools, **timeouts))
        proxy.start()
        cls.addClassCleanup(proxy.stop)
        return proxy

    def setUp(self):
        self.provider.reset()
        self.run_id = new_run()
        self.body = dict(CHARGE, customer="cus_" + self.run_id)
        self.started = time.monotonic()

    def charge(self, path, proxy=None):
        return call(proxy or self.proxy, "POST", self.provider.url(path), self.body, None, self.run_id, timeout=60)

    def effects(self, path):
        return [e for e in self.provider.effects_snapshot() if e["path"] == path and self.body["customer"] in e["body"]]

    def writes(self, path):
        return [w for w in self.provider.writes(path) if self.body["customer"].encode() in w[4]]

    def keys_seen(self, path):
        return {w[5] for w in self.writes(path)}

    def searches(self):
        return [r for r in self.provider.searches() if r[0] >= self.started]

    # same_key: the provider applies the charge, then the connection drops.
    # One agent request gets the charge (the same-key re-send is answered
    # with the stored one); one effect, one key.
    def test_same_key_commit_then_drop_reconciled_in_one_request(self):
        self.provider.script("commit_then_drop")
        answer = self.charge("/v1/charges")
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.header("idemgate-decision"), "reconciled")
        self.assertEqual(answer.header("idemgate-class"), "ok")
        effects = self.effects("/v1/charges")
        self.assertEqual(len(effects), 1)
        self.assertEqual(answer.json()["id"], effects[0]["id"])
        self.assertEqual(self.keys_seen("/v1/charges"), {answer.header("idemgate-key")})
        self.assertEqual(len(self.writes("/v1/charges")), 2)  # the lost one and the same-key re-send
        again = self.charge("/v1/charges")
        self.assertEqual(again.header("idemgate-decision"), "replayed")
        self.assertEqual(again.json()["id"], effects[0]["id"])
        self.assertEqual(len(self.writes("/v1/charges")), 2)

    # The first attempt outlives idemgate's upstream_response (unknown) and
    # is still running at the provider, which answers the same-key re-sends
    # 409 "key in use" until it finishes. Those 409s are waited out and do
    # not spend retry.bound (1 here): the agent gets the charge.
    def test_key_in_use_409_is_waited_out_without_spending_the_bound(self):
        self.provider.script("slow", seconds=2.5)
        answer = self.charge("/v1/charges")
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.header("idemgate-decision"), "reconciled")
        effects = self.effects("/v1/charges")
        self.assertEqual(len(effects), 1)
        self.assertEqual(answer.json()["id"], effects[0]["id"])
        in_use = [a for a in self.provider.answers if a[1] == 409 and a[0] >= self.started]
        self.assertGreaterEqual(len(in_use), 1, "the provider never answered 'key in use': the case did not happen")
        # bound 1 allows two dispatches; the 409s came on top and cost nothing.
        self.assertGreaterEqual(len(self.writes("/v1/charges")), 3)
        self.assertEqual(self.keys_seen("/v1/charges"), {answer.header("idemgate-key")})

    # query: the lookup finds the write; its JSON is the answer.
    def test_query_found_reconciled_in_one_request(self):
        self.provider.script("commit_then_drop")
        answer = self.charge("/v1/qcharges")
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.header("idemgate-decision"), "reconciled")
        found = answer.json()
        self.assertEqual(found["key"], answer.header("idemgate-key"))
        self.assertEqual(found["id"], self.effects("/v1/qcharges")[0]["id"])
        self.assertEqual(len(self.writes("/v1/qcharges")), 1)
        self.assertGreaterEqual(len(self.searches()), 1)

    # query: not found; once `settle` has passed since the outcome became
    # unknown, idemgate re-sends the same key, still inside the request.
    def test_query_not_found_then_settle_resends_same_key_in_one_request(self):
        self.provider.script("drop_before")
        answer = self.charge("/v1/qcharges")
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.header("idemgate-decision"), "reconciled")
        writes = self.writes("/v1/qcharges")
        self.assertEqual(len(writes), 2)
        self.assertEqual({w[5] for w in writes}, {answer.header("idemgate-key")})
        effects = self.effects("/v1/qcharges")
        self.assertEqual(len(effects), 1)
        self.assertEqual(answer.json()["id"], effects[0]["id"])
        searches = self.searches()
        self.assertTrue(searches and searches[0][0] < writes[1][0], "re-sent without looking it up first")
        self.assertGreaterEqual(writes[1][0] - writes[0][0], 0.9, "re-sent before settle had passed")

    # A 5xx on a money write whose provider does not honour keys may have
    # charged: unknown, looked up, re-sent only after settle.
    def test_5xx_without_honoured_key_is_unknown_and_reconciled(self):
        self.provider.script("status", 500)
        answer = self.charge("/v1/qhcharges")
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.header("idemgate-decision"), "reconciled")
        self.assertEqual(len(self.effects("/v1/qhcharges")), 1)
        self.assertEqual(len(self.writes("/v1/qhcharges")), 2)
        self.assertGreaterEqual(len(self.searches()), 1)

    # mode none: nothing can settle it; 422 money_unknown with the package,
    # never re-sent, and again on the next try.
    def test_mode_none_is_422_money_unknown_with_package(self):
        self.provider.script("commit_then_drop")
        first = self.charge("/v1/ncharges")
        problem = self.assert_unknown_package(first, "money_unknown")
        self.assertEqual(problem["idempotency_key"], first.header("idemgate-key"))
        self.assertEqual(problem["attempts"], 1)
        self.assertEqual(problem["tool"], "pay.none")
        again = self.charge("/v1/ncharges")
        self.assert_unknown_package(again, "money_unknown")
        self.assertEqual(len(self.writes("/v1/ncharges")), 1)
        self.assertEqual(len(self.effects("/v1/ncharges")), 1)

    # In flight: the first attempt is still at the provider; a second request
    # waits inline, then gets 409 in_flight (class pending), never a send.
    def test_in_flight_is_409_wait_with_class_pending(self):
        self.provider.script("hold")
        first = {}
        t = threading.Thread(target=lambda: first.setdefault("answer", self.charge("/v1/fcharges", self.long_proxy)))
        t.start()
        self.provider.wait_held()
        second = self.charge("/v1/fcharges", self.long_proxy)
        self.assert_wait(second, "in_flight")
        self.assertEqual(second.header("idemgate-class"), "pending")
        self.assertEqual(len(self.writes("/v1/fcharges")), 1)
        self.provider.release()
        t.join(30)
        self.assertEqual(first["answer"].status, 200, first["answer"].body)
        third = self.charge("/v1/fcharges", self.long_proxy)
        self.assertEqual(third.header("idemgate-decision"), "replayed")
        self.assertEqual(len(self.writes("/v1/fcharges")), 1)

    # Still unknown after `inline` (query not found, settle not over): 409
    # reconciling, safe to retry; the retries settle it with one effect.
    def test_reconciling_is_409_wait_then_settles(self):
        self.provider.script("drop_before")
        first = self.charge("/v1/wcharges")
        self.assert_wait(first, "reconciling")
        self.assertEqual(len(self.writes("/v1/wcharges")), 1)
        answer = retry_until_settled(self.proxy, self.provider.url("/v1/wcharges"), self.body, self.run_id, 20)
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.header("idemgate-decision"), "reconciled")
        self.assertEqual(len(self.effects("/v1/wcharges")), 1)
        self.assertEqual(self.keys_seen("/v1/wcharges"), {first.header("idemgate-key")})

    # Retry-After past max_retry_after: never held, never cut short. One
    # dispatch; the agent is told the provider's full 120 s, and a second
    # try inside the window is answered 429 again without a dispatch.
    def test_retry_after_past_the_cap_is_answered_in_full(self):
        self.provider.script("status", 429, {"Retry-After": "120"})
        first = self.charge("/v1/rcharges")
        self.assertEqual(first.status, 429, first.body)
        self.assertTrue(first.header("idemgate-class"))
        self.assertGreaterEqual(int(first.header("retry-after")), 115)
        for _ in range(2):
            again = self.charge("/v1/rcharges")
            self.assertEqual(again.status, 429, again.body)
            self.assertEqual(again.header("content-type"), "application/problem+json")
            problem = again.json()
            self.assertEqual(problem["reason_code"], "retry_after", problem)
            self.assertEqual(again.header("idemgate-decision"), "wait")
            self.assertTrue(again.header("idemgate-class"))
            self.assertGreaterEqual(int(again.header("retry-after")), 115)
            self.assertLessEqual(int(again.header("retry-after")), 120)
            self.assertGreaterEqual(float(problem["retry_after_s"]), 115)
        self.assertEqual(len(self.writes("/v1/rcharges")), 1)

    # python requests sends Accept-Encoding: gzip; the provider would
    # compress. Upstream sees identity, the receipt is extracted, and the
    # replay is the first answer byte for byte.
    def test_gzip_client_gets_plain_answer_receipt_and_identical_replay(self):
        answers = []
        with requests.Session() as s:
            s.trust_env = False
            for _ in range(2):
                r = s.post(self.provider.url("/v1/charges"), json=self.body, stream=True, timeout=30,
                           headers={"Idemgate-Run": self.run_id},
                           proxies={"http": "http://127.0.0.1:%d" % self.proxy.port})
                self.assertIn("gzip", r.request.headers["Accept-Encoding"])
                answers.append((r.status_code, {k.lower(): v for k, v in r.headers.items()},
                                r.raw.read(decode_content=False)))
                r.close()
        (s1, h1, raw1), (s2, h2, raw2) = answers
        self.assertEqual(s1, 200, raw1)
        self.assertEqual(h1.get("idemgate-decision"), "forwarded")
        self.assertEqual(h2.get("idemgate-decision"), "replayed")
        writes = self.writes("/v1/charges")
        self.assertEqual(len(writes), 1)
        upstream_ae = {k.lower(): v for k, v in writes[0][3].items()}.get("accept-encoding")
        self.assertEqual(upstream_ae, "identity")
        self.assertNotIn("content-encoding", h1)
        effect = self.effects("/v1/charges")[0]
        self.assertEqual(json.loads(raw1)["id"], effect["id"])
        self.assertEqual(raw2, raw1, "the replay differs from the first answer")
        intents = ops(self.proxy, "intents", "show", "--run", self.run_id)
        self.assertEqual(len(intents), 1)
        self.assertEqual(intents[0]["receipt"], effect["id"])

    # Escalated three times for one intent and reason: one open escalation.
    def test_escalation_once_per_intent_and_reason(self):
        self.provider.script("commit_then_drop")
        first = self.charge("/v1/ncharges")
        self.assert_unknown_package(first, "money_unknown")
        self.assert_unknown_package(self.charge("/v1/ncharges"), "money_unknown")
        self.assert_unknown_package(self.charge("/v1/ncharges"), "money_unknown")
        opened = self.open_escalations(self.proxy, self.run_id, "money_unknown")
        self.assertEqual(len(opened), 1, opened)
        self.assertEqual(str(opened[0]["intent_id"]), first.header("idemgate-intent"))

    # An unknown escalated (mode none) is settled later: the operator turns
    # on same-key reconciliation (SIGHUP) and the next try re-sends the key.
    # idemgate then closes that escalation itself.
    def test_escalation_resolved_by_later_reconciliation(self):
        port = self.provider.port
        proxy = self._start([tool("pay.esc", "/v1/echarges", port, mode="none")])
        self.provider.script("commit_then_drop")
        first = self.charge("/v1/echarges", proxy)
        self.assert_unknown_package(first, "money_unknown")
        self.assert_unknown_package(self.charge("/v1/echarges", proxy), "money_unknown")
        intent = first.header("idemgate-intent")
        mine = [e for e in self.open_escalations(proxy, self.run_id, "money_unknown") if str(e["intent_id"]) == intent]
        self.assertEqual(len(mine), 1, mine)

        with open(proxy.config_path, "w") as f:
            f.write(config(ledger_url(self.BACKEND, proxy.dir), [tool("pay.esc", "/v1/echarges", port)]))
        proxy.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: any(e.get("event") == "config_reloaded" for e in proxy.log_lines()), 10, "the reload")
        settled = self.charge("/v1/echarges", proxy)
        self.assertEqual(settled.status, 200, settled.body)
        self.assertEqual(settled.header("idemgate-decision"), "reconciled")
        effects = self.effects("/v1/echarges")
        self.assertEqual(len(effects), 1)
        self.assertEqual(settled.json()["id"], effects[0]["id"])
        self.assertEqual(self.keys_seen("/v1/echarges"), {first.header("idemgate-key")})
        after = [e for e in ops(proxy, "escalations", "list") if e["id"] == mine[0]["id"]]
        self.assertEqual(len(after), 1)
        self.assertNotEqual(after[0]["state"], "open", after[0])
        self.assertEqual(self.open_escalations(proxy, self.run_id), [])


class SqliteInline(InlineCases, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresInline(InlineCases, unittest.TestCase):
    BACKEND = "postgresql"


if __name__ == "__main__":
    unittest.main(verbosity=2)
