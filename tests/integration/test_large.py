"""Bodies stream through the proxy in constant memory: 256 MiB up and down
with the proxy's resident memory bounded (read from /proc)."""
import http.client
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BASE_CONFIG, SMALL_QUARANTINE_ENV, Proxy  # noqa: E402
from upstream import Upstream  # noqa: E402

MIB = 1024 * 1024
SIZE = 256 * MIB
# The proxy may grow by this much while 256 MiB pass through it.
GROWTH_LIMIT_KIB = 64 * 1024


class LargeBodyTest(unittest.TestCase):
    def test_256_mib_upload_and_download_in_bounded_memory(self):
        with Upstream() as up, Proxy(BASE_CONFIG, env=SMALL_QUARANTINE_ENV) as proxy:
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=120)
            conn.request("GET", up.url("/echo"))
            conn.getresponse().read()
            baseline = proxy.rss_kib()

            block = b"u" * MIB

            def chunks():
                for _ in range(SIZE // MIB):
                    yield block

            conn.request("POST", up.url("/sink"), body=chunks(), encode_chunked=True)
            got = json.loads(conn.getresponse().read())
            self.assertEqual(got["body_len"], SIZE)

            conn.request("GET", up.url("/bytes?n=%d" % SIZE))
            r = conn.getresponse()
            total = 0
            while True:
                part = r.read(MIB)
                if not part:
                    break
                total += len(part)
            self.assertEqual(total, SIZE)
            conn.close()
            peak = proxy.rss_peak_kib()
            growth = peak - baseline
            print("rss baseline %d KiB, peak %d KiB, growth %d KiB" % (baseline, peak, growth))
            self.assertLess(growth, GROWTH_LIMIT_KIB,
                            "proxy memory grew by %d KiB for a 256 MiB body" % growth)


if __name__ == "__main__":
    unittest.main(verbosity=2)
