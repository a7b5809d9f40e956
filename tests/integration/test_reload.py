"""SIGHUP reloads the config atomically: requests keep flowing through 100
reloads and none fails; an invalid file keeps the old config and logs every
error; a valid change takes effect for new requests."""
import http.client
import os
import signal
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BASE_CONFIG, Proxy, wait_until  # noqa: E402
from upstream import Upstream  # noqa: E402


class ReloadTest(unittest.TestCase):
    def test_requests_flow_through_100_sighups(self):
        with Upstream() as up, Proxy(BASE_CONFIG) as proxy:
            failures = []
            done = threading.Event()
            count = [0]

            def client():
                conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
                while not done.is_set():
                    try:
                        conn.request("GET", up.url("/echo"))
                        r = conn.getresponse()
                        r.read()
                        if r.status != 200:
                            failures.append(r.status)
                        count[0] += 1
                    except Exception as e:  # noqa: BLE001
                        failures.append(repr(e))
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
                conn.close()

            # Daemon threads, stopped by a cleanup too: a failed wait below
            # must end the test, not leave clients looping on a dead proxy.
            threads = [threading.Thread(target=client, daemon=True) for _ in range(4)]
            self.addCleanup(done.set)
            for t in threads:
                t.start()
            for i in range(100):
                proxy.proc.send_signal(signal.SIGHUP)
                wait_until(lambda: sum(1 for l in proxy.log_lines() if l.get("event") == "config_reloaded") > i,
                           what="reload %d" % (i + 1))
            done.set()
            for t in threads:
                t.join(30)
            self.assertEqual(failures, [])
            self.assertGreater(count[0], 20, "requests did not keep flowing during the reloads")

    def test_invalid_file_keeps_the_old_config(self):
        with Upstream() as up, Proxy(BASE_CONFIG) as proxy:
            with open(proxy.config_path, "a") as f:
                f.write("tools:\n  - name: x\n    match: { host: a.example }\n    efect: write\n")
            proxy.proc.send_signal(signal.SIGHUP)
            line = wait_until(lambda: [l for l in proxy.log_lines() if l.get("event") == "config_reload_failed"],
                              what="the reload failure")[0]
            self.assertTrue(any("efect" in e and "effect" in e for e in line["errors"]), line)
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
            conn.request("GET", up.url("/echo"))
            self.assertEqual(conn.getresponse().status, 200)
            conn.close()

    def test_valid_change_applies_to_new_requests(self):
        with Upstream() as up, Proxy(BASE_CONFIG) as proxy:
            with open(proxy.config_path, "a") as f:
                f.write("unmatched: deny\n")
            proxy.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: [l for l in proxy.log_lines() if l.get("event") == "config_reloaded"],
                       what="the reload")
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
            conn.request("GET", up.url("/echo"))
            r = conn.getresponse()
            self.assertEqual(r.status, 403)
            self.assertIn(b"policy_deny", r.read())
            conn.close()
            self.assertEqual(len(up.requests), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
