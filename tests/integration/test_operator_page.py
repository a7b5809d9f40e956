"""The operator page at / on the admin listener: in headless Chromium
(Debian's chromium driven by playwright-core from npm) the queue lists the
escalation a refused call made, its package is readable, approving it on
the page lets the agent's call through, and the dashboard draws non-empty
charts; screenshots are saved under <build>/test-artefacts/operator-page/.
The same pages over plain HTTP on SQLite, and the cross-site refusals."""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from admin_common import TOKEN, AdminBackends  # noqa: E402
from harness import BIN  # noqa: E402

PAYOUT = {"amount": 5000, "currency": "eur", "destination": "acct_1"}
CHARGE = {"amount": 1000, "currency": "eur", "customer": "cus_1"}
ARTEFACTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(BIN))), "test-artefacts", "operator-page")


def playwright_dir():
    """A directory whose node_modules holds playwright-core, installed with npm
    on first use (no browser download: the test drives Debian's chromium)."""
    directory = os.environ.get("IDEMGATE_NODE_PLAYWRIGHT_DIR") or os.path.join(
        tempfile.gettempdir(), "idemgate-node-playwright")
    if os.path.exists(os.path.join(directory, "node_modules", "playwright-core", "package.json")):
        return directory
    npm = shutil.which("npm")
    if not npm:
        raise AssertionError("npm is not installed: the operator page test needs `npm install playwright-core`")
    out = subprocess.run([npm, "install", "--no-save", "--no-audit", "--no-fund", "--prefix", directory,
                          "playwright-core@1"], capture_output=True, timeout=300,
                         env=dict(os.environ, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1"))
    if out.returncode != 0:
        raise AssertionError("npm install playwright-core failed:\n" + out.stderr.decode(errors="replace"))
    return directory


class PageSession:
    """Signs in through the login form and keeps the session cookie."""

    def __init__(self, proxy):
        self.proxy = proxy
        answer = self.request("POST", "/login", "token=" + urllib.parse.quote(TOKEN),
                              {"Content-Type": "application/x-www-form-urlencoded"}, cookie=False)
        assert answer[0] == 303, answer
        self.cookie = answer[1]["set-cookie"].split(";")[0]
        assert TOKEN not in self.cookie

    def request(self, method, path, body=None, headers=None, cookie=True):
        conn = http.client.HTTPConnection("127.0.0.1", self.proxy.admin_port, timeout=30)
        h = dict(headers or {})
        if cookie:
            h["Cookie"] = self.cookie
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode())
        conn.close()
        return out


class PageCases:

    def make_signals(self):
        """A refused call (pending approval), a retried read and a completed charge."""
        refused = self.call("POST", "/v1/payouts", PAYOUT)
        self.assertEqual(refused.json()["reason_code"], "pending_approval")
        self.assertEqual(self.call("POST", "/v1/charges", CHARGE).status, 200)
        self.provider.script("status", 503)
        self.call("GET", "/v1/items/7")
        self.call("GET", "/v1/items/7")
        return refused.json()

    def test_pages_over_http_and_cross_site_refusals(self):
        package = self.make_signals()
        s = PageSession(self.proxy)
        status, _, html = s.request("GET", "/")
        self.assertEqual(status, 200)
        self.assertIn(self.run_id, html)
        [esc] = self.open_escalations("pending_approval")
        self.assertIn('data-id="%d"' % esc["id"], html)
        status, headers, html = s.request("GET", "/escalations/%d" % esc["id"])
        self.assertEqual(status, 200)
        self.assertIn("default-src 'none'", headers["content-security-policy"])
        self.assertIn(package["trace_id"], html)
        self.assertIn(package["question_for_human"].replace("'", "&#39;")[:40], html)
        self.assertNotIn("<script src", html)
        self.assertNotIn("http://", html.replace('xmlns="http://www.w3.org/2000/svg"', ""))
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', html).group(1)
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        action = "/actions/escalations/%d/resolve" % esc["id"]
        # No CSRF token, a wrong one, or another origin: refused, nothing changes.
        for body, extra in (("action=deny", {}), ("action=deny&csrf=" + "0" * 64, {}),
                            ("action=deny&csrf=" + csrf, {"Origin": "http://evil.example"}),
                            ("action=deny&csrf=" + csrf, {"Sec-Fetch-Site": "cross-site"})):
            status, _, _ = s.request("POST", action, body, dict(form, **extra))
            self.assertEqual(status, 403, (body, extra))
        # Without the session cookie the CSRF token alone is not enough.
        status, _, _ = s.request("POST", action, "action=deny&csrf=" + csrf, form, cookie=False)
        self.assertEqual(status, 401)
        self.assertEqual(self.open_escalations("pending_approval")[0]["state"], "open")
        status, headers, _ = s.request("POST", action, "action=deny&csrf=" + csrf, form)
        self.assertEqual(status, 303)
        self.assertEqual(self.proxy.admin_json("GET", "/api/escalations/%d" % esc["id"])["state"], "denied")
        status, _, html = s.request("GET", "/dashboard")
        self.assertEqual(status, 200)
        self.assertGreater(html.count('class="bar"'), 0)
        status, _, html = s.request("GET", "/runs/" + self.run_id)
        self.assertIn("pay.charge", html)


class SqlitePage(AdminBackends, PageCases, unittest.TestCase):
    BACKEND = "sqlite"


class PostgresPageInChromium(AdminBackends, PageCases, unittest.TestCase):
    BACKEND = "postgresql"

    def test_chromium_queue_package_approve_dashboard(self):
        if not os.path.exists("/usr/bin/chromium"):
            raise AssertionError("chromium is not installed (scripts/packages.txt lists it)")
        package = self.make_signals()
        os.makedirs(ARTEFACTS, exist_ok=True)
        user_data = tempfile.mkdtemp(prefix="idemgate-chromium-")
        self.addCleanup(shutil.rmtree, user_data, True)
        node_dir = playwright_dir()
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "page", "operator_page.js")
        out = subprocess.run(["node", script, "http://127.0.0.1:%d" % self.proxy.admin_port, TOKEN, self.run_id,
                              ARTEFACTS, user_data], capture_output=True, timeout=120,
                             env=dict(os.environ, NODE_PATH=os.path.join(node_dir, "node_modules")))
        self.assertEqual(out.returncode, 0, out.stderr.decode(errors="replace"))
        seen = json.loads(out.stdout.decode().strip().splitlines()[-1])
        self.assertTrue(seen["login_visible"])
        self.assertEqual(seen["queue_rows"], 1, seen)
        self.assertEqual(seen["queue_reason"], "pending_approval")
        self.assertEqual(seen["question"], package["question_for_human"])
        self.assertEqual(seen["key"], package["idempotency_key"])
        self.assertEqual(seen["trace"], package["trace_id"])
        self.assertEqual(json.loads(seen["package_json"])["trace_id"], package["trace_id"])
        self.assertGreaterEqual(seen["tools_tried"], 1)
        self.assertEqual(len(seen["dialogs"]), 1, seen)
        self.assertEqual(seen["state_after"], "approved")
        self.assertEqual(seen["actions_left"], 0)
        self.assertEqual(seen["run_state"], "active")
        self.assertGreaterEqual(seen["run_intents"], 2)  # the payout and the charge
        for chart in ("chart-escalations", "chart-open", "chart-refusals", "chart-retry-depth"):
            if chart == "chart-open":
                continue  # approved: nothing of this run stays open (other tests' rows may)
            self.assertGreater(seen["charts"][chart], 0, (chart, seen["charts"]))
        self.assertEqual(seen["external_requests"], [])
        for name in ("queue.png", "escalation.png", "run.png", "dashboard.png"):
            path = os.path.join(ARTEFACTS, name)
            self.assertGreater(os.path.getsize(path), 10000, path)
        # Approved on the page: the agent's next call goes through, once.
        through = self.call("POST", "/v1/payouts", PAYOUT)
        self.assertEqual(through.status, 200, through.body)
        self.assertEqual(len(self.provider.writes("/v1/payouts")), 1)
        print("operator page screenshots:", ARTEFACTS)


if __name__ == "__main__":
    unittest.main(verbosity=2)
