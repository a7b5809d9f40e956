"""An idemgate with its admin listener on port 0 (token in a file) in front of
the provider simulator, and a client for the admin API. Used by the admin,
metrics, sweeper, webhook and operator-page tests, on both ledgers."""
import os
import sys
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from enforce_common import call, ledger_url, make_config, new_run, request  # noqa: E402
from harness import Proxy, wait_until  # noqa: E402
from provider import Provider  # noqa: E402

TOKEN = "admin-token-" + "7f3c9a1e5b2d4c6f8a0b"


class AdminProxy(Proxy):
    """A Proxy whose config adds `admin:`; p.admin_port once started."""

    def __init__(self, config_yaml, directory=None):
        super().__init__(config_yaml)
        if directory:
            self.dir = directory
            self.config_path = os.path.join(directory, "config.yaml")
            with open(self.config_path, "w") as f:
                f.write(config_yaml)
            self.port_file = os.path.join(directory, "port")
            self.stderr_path = os.path.join(directory, "stderr-%s.log" % uuid.uuid4().hex[:6])
            for stale in (self.port_file, os.path.join(directory, "admin-port")):
                if os.path.exists(stale):
                    os.unlink(stale)
        self.admin_port_file = os.path.join(self.dir, "admin-port")
        self.extra_args = ["--admin-port-file", self.admin_port_file]
        self.admin_port = None

    def start(self):
        super().start()
        with open(self.admin_port_file) as f:
            self.admin_port = int(f.read().strip())
        return self

    def admin(self, method, path, body=None, token=TOKEN, headers=None, timeout=30):
        h = {"Authorization": "Bearer " + token} if token is not None else {}
        h.update(headers or {})
        return request(self.admin_port, method, path, body, h, timeout)

    def admin_json(self, method, path, body=None, expect=200):
        answer = self.admin(method, path, body)
        assert answer.status == expect, (method, path, answer.status, answer.body)
        return answer.json()


def admin_config(provider_port, ledger, directory, token=True, listen="127.0.0.1:0", notify=None, ttl="15m"):
    text = make_config(provider_port, ledger)
    if ttl != "15m":
        text = text.replace("reconcile: { mode: same_key, ttl: 15m }", "reconcile: { mode: same_key, ttl: %s }" % ttl)
    lines = ["admin:", "  listen: %s" % listen]
    if token:
        token_file = os.path.join(directory, "admin.token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        lines.append("  token_file: %s" % token_file)
    if notify:
        lines.append("  notify: { url: \"%s\", secret: \"%s\" }" % notify)
    return text + "\n".join(lines) + "\n"


class AdminBackends:
    """Mixin: subclasses set BACKEND; setUp gives self.provider, self.proxy (an AdminProxy), self.run_id."""
    BACKEND = "sqlite"
    TTL = "15m"
    NOTIFY = None

    def setUp(self):
        self.provider = Provider().__enter__()
        self.addCleanup(self.provider.__exit__, None, None, None)
        self.proxy = self.start_proxy()
        self.run_id = new_run()

    def start_proxy(self, directory=None):
        import tempfile
        directory = directory or tempfile.mkdtemp(prefix="idemgate-admin-")
        cfg = admin_config(self.provider.port, ledger_url(self.BACKEND, directory), directory, ttl=self.TTL,
                           notify=self.NOTIFY)
        proxy = AdminProxy(cfg, directory)
        proxy.start()
        self.addCleanup(proxy.stop)
        return proxy

    def call(self, method, path, body=None, headers=None, run=None, proxy=None):
        return call(proxy or self.proxy, method, self.provider.url(path), body, headers, run or self.run_id)

    def open_escalations(self, reason=None):
        items = self.proxy.admin_json("GET", "/api/escalations?state=open&limit=1000")["escalations"]
        return [e for e in items if e["run"] == self.run_id and (reason is None or e["reason_code"] == reason)]


__all__ = ["AdminBackends", "AdminProxy", "TOKEN", "admin_config", "wait_until", "new_run"]
