#!/usr/bin/env python3
"""Open N keep-alive connections to a forward proxy, send one absolute-form
GET on each (so each is an established, used, keep-alive connection), read
the answer, then hold them all idle and report the proxy's RSS.

usage: idle_clients.py PROXY_HOST PROXY_PORT TARGET_URL PROXY_PID N [HOLD_S]
Prints one line of key=value pairs for bench/idle-connections to format.
"""
import resource
import selectors
import socket
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def main():
    host, port, target, pid, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    hold = float(sys.argv[6]) if len(sys.argv) > 6 else 3.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard) if hard != resource.RLIM_INFINITY else want, hard))
    hostport = target.split("://", 1)[1].split("/", 1)[0]
    request = f"GET {target} HTTP/1.1\r\nHost: {hostport}\r\n\r\n".encode()

    baseline = rss_kib(pid)
    sel = selectors.DefaultSelector()
    conns = []
    window = 200
    failed = 0
    started = time.monotonic()
    for base in range(0, n, window):
        pending = {}
        for _ in range(min(window, n - base)):
            s = socket.create_connection((host, port), timeout=10)
            s.setblocking(False)
            s.sendall(request)
            pending[s.fileno()] = [s, b""]
            sel.register(s, selectors.EVENT_READ)
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1):
                s, buf = pending[key.fd]
                chunk = s.recv(65536)
                if not chunk:
                    failed += 1
                    sel.unregister(s)
                    s.close()
                    del pending[key.fd]
                    continue
                buf += chunk
                pending[key.fd][1] = buf
                head, sep, body = buf.partition(b"\r\n\r\n")
                if not sep:
                    continue
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if len(body) >= length:
                    if not head.startswith(b"HTTP/1.1 200"):
                        failed += 1
                    sel.unregister(s)
                    del pending[key.fd]
                    conns.append(s)
        failed += len(pending)
        for s, _ in pending.values():
            sel.unregister(s)
            s.close()
    opened = time.monotonic() - started

    time.sleep(hold)
    # A connection the proxy closed is readable (EOF): count the ones still open.
    for s in conns:
        sel.register(s, selectors.EVENT_READ)
    closed = sum(1 for _ in sel.select(timeout=0))
    rss = rss_kib(pid)
    held = len(conns) - closed
    per_conn = (rss - baseline) / held if held else 0.0
    print(f"requested={n} held={held} failed={failed} closed_by_proxy={closed} "
          f"baseline_kib={baseline} rss_kib={rss} per_conn_kib={per_conn:.2f} open_s={opened:.1f}")
    for s in conns:
        s.close()


if __name__ == "__main__":
    main()
