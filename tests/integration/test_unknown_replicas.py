"""Two replicas on one PostgreSQL with different timeouts. Replica A
dispatches a charge the provider takes 6 s to make (A's deadlines allow
it); replica B's own deadlines are far shorter (connect and response
500 ms, idle 1 s, outcome_record 1 s: a lease of 3 s had B begun it). An
attempt is owned by the lease its own process recorded: B must neither
expire A's attempt nor reconcile or dispatch anything while it runs. The
agent retries through B the whole time: one effect, one dispatch, no lookup
before A's answer. The provider does not deduplicate keys and the tool
reconciles by query, so a mistaken re-send would be a second charge."""
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from provider import Provider  # noqa: E402
from unknown_common import (CHARGE, LedgerBackend, Proxy, UnknownAssertions, config,  # noqa: E402
                            dispatch_in_background, new_run, retry_until_settled, shared_key_file, tool)

ATTEMPT_S = 6  # twice B's own lease (its connect + idle + response + outcome_record)


class TwoReplicasTest(LedgerBackend, UnknownAssertions, unittest.TestCase):
    BACKEND = "postgresql"

    def test_short_timeout_replica_never_touches_a_live_attempt(self):
        with Provider(dedup=False) as provider:
            tools = [tool("pay.q", "/v1/charges", provider.port, mode="query", settle="1s", inline="2s")]
            ledger = self.ledger_for(None)
            key = shared_key_file()  # replicas of one ledger share its fingerprint key
            a = Proxy(config(ledger, tools, connect="1s", response="30s", fingerprint_key_file=key)).start()
            self.addCleanup(a.stop)
            b = Proxy(config(ledger, tools, connect="500ms", response="500ms", idle="1s",
                             outcome_record="1s", fingerprint_key_file=key)).start()
            self.addCleanup(b.stop)
            run = new_run()
            url = provider.url("/v1/charges")
            provider.script("slow", seconds=ATTEMPT_S)
            t, first = dispatch_in_background(a, url, CHARGE, run, provider)
            waits = []
            retried_at = time.monotonic()
            answer = retry_until_settled(b, url, CHARGE, run, ATTEMPT_S + 30,
                                         on_answer=lambda x: waits.append(x) if x.status == 409 else None)
            t.join(60)
            self.assertLess(retried_at, first["at"], "the agent retried after the owner answered: no overlap")
            self.assert_only_the_owner_dispatched(provider, first, answer, waits)


if __name__ == "__main__":
    unittest.main(verbosity=2)
