"""/metrics on the admin listener: Prometheus text that `promtool check
metrics` accepts (Debian's prometheus package), and a real Prometheus
started here scrapes it with the bearer token and answers a query for the
decision counter this test caused."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from admin_common import AdminBackends  # noqa: E402
from harness import wait_until  # noqa: E402

CHARGE = {"amount": 1000, "currency": "eur", "customer": "cus_1"}


def listening_port(pid):
    """The TCP port process pid listens on (Prometheus has no port file)."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if parts[3] == "0A" and parts[9] in inodes:
                    return int(parts[1].split(":")[-1], 16)
    return None


def metric_lines(text, name):
    return [line for line in text.splitlines() if line.startswith(name + "{") or line.startswith(name + " ")]


class MetricsCases:

    def test_metrics_pass_promtool_and_count_decisions(self):
        self.assertEqual(self.call("POST", "/v1/charges", CHARGE).status, 200)
        self.assertEqual(self.call("POST", "/v1/charges", CHARGE).header("idemgate-decision"), "replayed")
        self.assertEqual(self.call("POST", "/v1/payouts", {"amount": 1}).status, 403)
        answer = self.proxy.admin("GET", "/metrics")
        self.assertEqual(answer.status, 200)
        self.assertTrue(answer.header("content-type").startswith("text/plain; version=0.0.4"))
        text = answer.body.decode()
        self.assertIn('idemgate_decisions_total{tool="pay.charge",decision="forwarded",class="ok",reason_code=""} 1',
                      text)
        self.assertIn('idemgate_decisions_total{tool="pay.charge",decision="replayed",class="ok",reason_code=""} 1', text)
        self.assertIn('decision="refused",class="policy_deny",reason_code="pending_approval"} 1', text)
        self.assertTrue(metric_lines(text, "idemgate_escalations_open"), text)
        self.assertIn("idemgate_ledger_up 1", text)
        self.assertIn('idemgate_upstream_exchange_duration_seconds_bucket{le="+Inf"} 1', text)
        self.assertNotIn(self.run_id, text)  # never a run, key or fingerprint as a label
        promtool = shutil.which("promtool")
        self.assertIsNotNone(promtool, "promtool is not installed (Debian package prometheus, scripts/packages.txt)")
        check = subprocess.run([promtool, "check", "metrics"], input=answer.body, capture_output=True, timeout=60)
        self.assertEqual(check.returncode, 0, check.stdout.decode() + check.stderr.decode())


    def test_lone_admissions_are_written_from_the_network_thread_on_postgresql_only(self):
        # Its connection is made after start: a write before that goes
        # through the workers, as does every write on SQLite.
        count = [0]

        def direct():
            count[0] += 1
            self.assertEqual(self.call("POST", "/v1/tickets", {"title": "t%d" % count[0]}).status, 200)
            lines = metric_lines(self.proxy.admin("GET", "/metrics").body.decode(),
                                 "idemgate_ledger_direct_admissions_total")
            self.assertEqual(len(lines), 1, lines)
            return float(lines[0].split()[-1])
        if self.BACKEND == "sqlite":
            self.assertEqual(direct(), 0)
        else:
            wait_until(lambda: direct() >= 1, 30, "a lone admission written directly")


class SqliteMetrics(AdminBackends, MetricsCases, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresMetrics(AdminBackends, MetricsCases, unittest.TestCase):
    BACKEND = "postgresql"

    def test_a_real_prometheus_scrapes_it(self):
        prometheus = shutil.which("prometheus")
        self.assertIsNotNone(prometheus, "prometheus is not installed (scripts/packages.txt)")
        self.assertEqual(self.call("POST", "/v1/tickets", {"title": "scraped"}).status, 200)
        d = tempfile.mkdtemp(prefix="idemgate-prom-")
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(d, "prometheus.yml"), "w") as f:
            f.write("global: { scrape_interval: 1s, scrape_timeout: 1s }\n"
                    "scrape_configs:\n"
                    "  - job_name: idemgate\n"
                    "    metrics_path: /metrics\n"
                    "    authorization: { type: Bearer, credentials_file: %s }\n"
                    "    static_configs: [ { targets: [\"127.0.0.1:%d\"] } ]\n"
                    % (os.path.join(self.proxy.dir, "admin.token"), self.proxy.admin_port))
        log = open(os.path.join(d, "prometheus.log"), "wb")
        proc = subprocess.Popen([prometheus, "--config.file=" + os.path.join(d, "prometheus.yml"),
                                 "--storage.tsdb.path=" + os.path.join(d, "data"),
                                 "--web.listen-address=127.0.0.1:0", "--log.level=warn"],
                                stdout=log, stderr=log, cwd=d)

        def stop():
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
        self.addCleanup(stop)
        port = wait_until(lambda: proc.poll() is None and listening_port(proc.pid), 60, "prometheus to listen")
        query = 'idemgate_decisions_total{tool="desk.ticket",decision="forwarded",class="ok"}'
        url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (port, urllib.parse.quote(query))

        def answered():
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    result = json.load(r)["data"]["result"]
            except OSError:
                return None
            return result or None
        result = wait_until(answered, 60, "prometheus to scrape idemgate")
        self.assertEqual(len(result), 1, result)
        self.assertEqual(result[0]["metric"]["job"], "idemgate")
        self.assertEqual(result[0]["value"][1], "1")
        with urllib.request.urlopen("http://127.0.0.1:%d/api/v1/targets" % port, timeout=5) as r:
            targets = json.load(r)["data"]["activeTargets"]
        self.assertEqual([t["health"] for t in targets], ["up"], targets)



if __name__ == "__main__":
    unittest.main(verbosity=2)
