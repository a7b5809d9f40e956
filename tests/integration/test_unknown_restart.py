"""A rolling restart on one host: a new idemgate process starts on the same
port (SO_REUSEPORT) and the same ledger while the old one, after SIGTERM,
drains a charge the provider takes 6 s to make. Both processes have their
own default replica identity, so the new one must not take the old one's
live attempt for unknown. The tool reconciles by query against a provider
that does not deduplicate keys, so any re-send is a second charge. The agent
keeps retrying throughout: exactly one effect. Both ledgers."""
import os
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import wait_until  # noqa: E402
from provider import Provider  # noqa: E402
from unknown_common import (CHARGE, LedgerBackend, Proxy, UnknownAssertions, config,  # noqa: E402
                            dispatch_in_background, free_port, new_run, retry_until_settled, shared_key_file,
                            tool)


CHARGE_S = 6  # the old process drains it; long enough for the new one to start beside it


class RestartOverlapCases(UnknownAssertions):
    def test_new_process_on_same_port_leaves_draining_attempt_alone(self):
        with Provider(dedup=False) as provider:
            port = free_port()
            ledger = self.ledger_for(tempfile.mkdtemp(prefix="idemgate-restart-"))
            tools = [tool("pay.q", "/v1/charges", provider.port, mode="query", settle="1s", inline="2s")]
            # The new process reads the old one's fingerprint key (on SQLite it
            # lies beside the ledger file; on PostgreSQL it is configured).
            cfg = config(ledger, tools, listen="127.0.0.1:%d" % port, connect="1s", response="8s", drain="15s",
                         fingerprint_key_file=shared_key_file())
            old = Proxy(cfg).start()
            self.addCleanup(old.stop)
            run = new_run()
            url = provider.url("/v1/charges")
            provider.script("slow", seconds=CHARGE_S)
            t, first = dispatch_in_background(old, url, CHARGE, run, provider)

            new = Proxy(cfg).start()  # same port, same ledger, while the old one still runs
            self.addCleanup(new.stop)
            self.assertEqual(new.port, port)
            old.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: any(e.get("event") == "draining" for e in old.log_lines()), 10, "the old to drain")

            waits = []
            retried_at = time.monotonic()
            answer = retry_until_settled(new, url, CHARGE, run, 40, resets_ok=True,
                                         on_answer=lambda a: waits.append(a) if a.status == 409 else None)
            t.join(60)
            self.assertEqual(old.proc.wait(30), 0, old.stderr())

            self.assertLess(retried_at, first["at"], "the agent retried after the owner answered: no overlap")
            self.assert_only_the_owner_dispatched(provider, first, answer, waits)


class SqliteRestartOverlap(LedgerBackend, RestartOverlapCases, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresRestartOverlap(LedgerBackend, RestartOverlapCases, unittest.TestCase):
    BACKEND = "postgresql"


if __name__ == "__main__":
    unittest.main(verbosity=2)
