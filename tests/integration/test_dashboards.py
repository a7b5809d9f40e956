"""The Grafana dashboard (docker/grafana/dashboards/*.json) verified: every
panel's SQL runs against a freshly migrated PostgreSQL ledger that real
traffic through idemgate filled (completed, retried, refused, pending
approval, an unknown the sweeper escalated), and returns the columns the
panel expects. The compose file is checked with `docker compose config`
where a docker client with compose exists, skipped with the reason where not."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from admin_common import AdminBackends, AdminProxy, admin_config  # noqa: E402
from harness import wait_until  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASHBOARDS = sorted(glob.glob(os.path.join(ROOT, "docker", "grafana", "dashboards", "*.json")))
CHARGE = {"amount": 1000, "currency": "eur", "customer": "cus_dash"}

# Grafana's macros for the PostgreSQL data source, as the time range of the last day.
MACROS = {
    r"\$__timeFilter\((\w+)\)": r"\1 BETWEEN now() - interval '24 hours' AND now() + interval '1 hour'",
    r"\$__timeFrom\(\)": "(now() - interval '24 hours')",
    r"\$__timeTo\(\)": "(now() + interval '1 hour')",
}

# What each panel's query must answer with: its columns, and whether the
# rows made here must show up in it.
EXPECTED = {
    "Duplicate receipts (must be 0)": (["local keys with >1 provider receipt"], True),
    "Unknown past TTL": (["intents unknown past their TTL"], True),
    "Escalations by reason per hour": (["time", "metric", "value"], True),
    "Same-fingerprint refusals per hour": (["time", "metric", "value"], True),
    "Retry depth by tool": (["tool / attempts", "intents"], True),
    "Refusals by tool and reason (time range)": (["tool", "reason_code", "refusals",
                                                  "fingerprints (per hour, summed)"], True),
    "Unknown past TTL: intents": (["id", "run_id", "tool", "idem_key", "unknown_since", "ttl_s", "recovered"], True),
    "Duplicate receipts: keys": (["intent_id", "idem_key", "receipts"], False),
}


def psql(url, sql):
    out = subprocess.run(["psql", "-X", "-q", "-A", "-F", "\t", "-P", "footer=off", "-v", "ON_ERROR_STOP=1",
                          "-d", url, "-c", sql], capture_output=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError("psql failed for:\n%s\n%s" % (sql, out.stderr.decode(errors="replace")))
    lines = out.stdout.decode().splitlines()
    return lines[0].split("\t") if lines else [], [line.split("\t") for line in lines[1:]]


def with_database(url, name):
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


def panels(dashboard):
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panels(panel)  # rows nest their panels


class DashboardQueries(AdminBackends, unittest.TestCase):
    BACKEND = "postgresql"
    TTL = "1s"

    def setUp(self):
        base = os.environ.get("IDEMGATE_TEST_PG")
        if not base:
            raise AssertionError("IDEMGATE_TEST_PG is not set: run through scripts/test (it starts PostgreSQL)")
        name = "idemgate_dash_" + uuid.uuid4().hex[:10]
        psql(base, "CREATE DATABASE " + name)
        self.addCleanup(lambda: psql(base, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name))
        self.ledger = with_database(base, name)
        super().setUp()

    def start_proxy(self, directory=None):
        directory = directory or tempfile.mkdtemp(prefix="idemgate-dash-")
        proxy = AdminProxy(admin_config(self.provider.port, self.ledger, directory, ttl=self.TTL), directory)
        proxy.start()
        self.addCleanup(proxy.stop)
        return proxy

    def fill(self):
        self.assertEqual(self.call("POST", "/v1/charges", CHARGE).status, 200)
        self.assertEqual(self.call("POST", "/v1/charges", CHARGE).header("idemgate-decision"), "replayed")
        self.provider.script("status", 503)
        self.call("POST", "/v1/tickets", {"title": "retried"})
        self.call("POST", "/v1/tickets", {"title": "retried"})
        for _ in range(2):
            self.assertEqual(self.call("POST", "/v1/payouts", {"amount": 1}).status, 403)
        self.assertEqual(self.call("POST", "/v1/refunds", {"charge": "ch_1"}).status, 403)
        # An unknown nobody comes back for: the process dies mid-dispatch.
        self.provider.script("hold")
        agent = threading.Thread(target=self._quiet_call)
        agent.start()
        self.provider.wait_held()
        self.proxy.stop(sig=9)
        self.provider.release()
        agent.join(30)
        self.proxy = self.start_proxy(self.proxy.dir)
        wait_until(lambda: psql(self.ledger, "SELECT count(*) FROM dash_unknown_past_ttl")[1][0][0] != "0", 30,
                   "an unknown past its TTL")
        wait_until(lambda: psql(self.ledger, "SELECT count(*) FROM escalations WHERE reason_code = 'money_unknown'")
                   [1][0][0] != "0", 30, "the sweeper's escalation")

    def _quiet_call(self):
        try:
            self.call("POST", "/v1/charges", dict(CHARGE, customer="cus_lost"))
        except OSError:
            pass

    def test_every_panel_query_runs_and_answers_its_columns(self):
        self.assertTrue(DASHBOARDS, "no dashboard JSON under docker/grafana/dashboards")
        self.fill()
        seen = set()
        for path in DASHBOARDS:
            with open(path) as f:
                dashboard = json.load(f)
            for panel in panels(dashboard):
                for target in panel.get("targets", []):
                    sql = target.get("rawSql")
                    if not sql:
                        continue
                    title = panel.get("title", "")
                    with self.subTest(panel=title):
                        self.assertIn(title, EXPECTED, "a new panel: add its expected columns here")
                        for macro, replacement in MACROS.items():
                            sql = re.sub(macro, replacement, sql)
                        self.assertNotIn("$__", sql, "a Grafana macro this test does not know")
                        columns, rows = psql(self.ledger, sql)
                        want, non_empty = EXPECTED[title]
                        self.assertEqual(columns, want, sql)
                        if non_empty:
                            self.assertTrue(rows, "no rows for " + title)
                        seen.add(title)
        self.assertEqual(seen, set(EXPECTED))
        # The stats: one unknown past TTL, and no key with two receipts.
        self.assertEqual(psql(self.ledger, "SELECT count(*) FROM dash_unknown_past_ttl")[1], [["1"]])
        self.assertEqual(psql(self.ledger, "SELECT count(*) FROM dash_duplicate_receipts")[1], [["0"]])


class ComposeFile(unittest.TestCase):
    def test_docker_compose_config(self):
        docker = shutil.which("docker")
        if not docker:
            self.skipTest("no docker client on this machine: docker/compose.yaml not validated")
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=60)
        if probe.returncode != 0:
            self.skipTest("the docker client here has no compose plugin (`docker compose version` failed: %s): "
                          "docker/compose.yaml not validated" % probe.stderr.decode(errors="replace").strip()[:120])
        out = subprocess.run([docker, "compose", "-f", os.path.join(ROOT, "docker", "compose.yaml"), "config", "-q"],
                             capture_output=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr.decode(errors="replace"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
