"""Starts idemgate as a real process on port 0 for integration tests."""
import json
import os
import signal
import subprocess
import tempfile
import time

BIN = os.environ.get("IDEMGATE_BIN", "idemgate")

# For tests that read the proxy's resident memory: under AddressSanitizer
# freed memory sits in a quarantine (256 MiB by default) before reuse, which
# would read as growth, so it is kept small.
SMALL_QUARANTINE_ENV = {"ASAN_OPTIONS": (os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=4:"
                                         "thread_local_quarantine_size_kb=256").lstrip(":")}


def wait_until(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.01)  # polling interval of a deadline-bounded wait


def read_head(sock):
    """Reads from sock until its bytes hold a blank line (the end of an HTTP
    header) or the peer ends the stream; everything read."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def proxy_side_has_fin(upstream_port):
    """True once some connection to 127.0.0.1:upstream_port on this machine
    has received its peer's FIN and not closed yet (CLOSE_WAIT in
    /proc/net/tcp): the proxy's end of an upstream connection the upstream
    closed while the proxy kept it."""
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            remote_ip, remote_port = fields[2].split(":")
            if remote_ip == "0100007F" and int(remote_port, 16) == upstream_port and fields[3] == "08":
                return True
    return False


class Proxy:
    """`with Proxy(yaml_text) as p:` gives p.port, p.url(), p.log_lines()."""

    def __init__(self, config_yaml, extra_args=(), env=None):
        self.dir = tempfile.mkdtemp(prefix="idemgate-it-")
        self.config_path = os.path.join(self.dir, "config.yaml")
        with open(self.config_path, "w") as f:
            f.write(config_yaml)
        self.port_file = os.path.join(self.dir, "port")
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        self.extra_args = list(extra_args)
        self.env = env
        self.proc = None
        self.port = None

    def start(self):
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--config", self.config_path, "--port-file", self.port_file] + self.extra_args,
            stdout=subprocess.DEVNULL, stderr=self._stderr, cwd=self.dir,
            env=dict(os.environ, **self.env) if self.env else None)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("idemgate exited early:\n" + self.stderr())
            return os.path.exists(self.port_file)

        wait_until(ready, 30, "idemgate to listen")
        with open(self.port_file) as f:
            self.port = int(f.read().strip())
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if hasattr(self, "_stderr"):
            self._stderr.close()
        return self.proc.returncode if self.proc else None

    def stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")

    def log_lines(self):
        # The proxy may be writing while we read: a read can end inside a
        # write(2) of a batch of lines, so only lines with their newline count.
        text = self.stderr()
        out = []
        for line in text[:text.rfind("\n") + 1].splitlines():
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def proxy_url(self):
        return "http://127.0.0.1:%d" % self.port

    def rss_peak_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return 0

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


BASE_CONFIG = """\
listen: 127.0.0.1:0
threads: 2
ledger: { url: "sqlite:./ledger.db" }
egress: { allow_hosts: ["*"], allow_loopback: true, allow_private: true }
timeouts: { client_header: 5s, upstream_connect: 2s, upstream_response: 2s, idle: 10s, drain: 10s }
"""
