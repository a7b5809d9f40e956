"""HTTPS for integration tests: a throwaway test CA made with the openssl CLI,
server certificates it signs (for the right name, or a wrong one), and the
provider simulator served over TLS with one of them."""
import os
import ssl
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from provider import Provider  # noqa: E402


def _openssl(*args, cwd):
    out = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError("openssl %s failed: %s" % (" ".join(args), out.stderr.decode()))


class TestCa:
    """A CA in `directory`; cert_for() issues server certificates."""

    def __init__(self, directory):
        self.dir = directory
        self.cert = os.path.join(directory, "test-ca.pem")
        key = os.path.join(directory, "test-ca.key")
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", key, "-out", self.cert, "-days", "2", "-subj", "/CN=idemgate test upstream CA",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
        self._key = key

    def cert_for(self, name, san):
        """Returns (cert, key) paths for a server certificate carrying `san`
        ("DNS:localhost,IP:127.0.0.1")."""
        base = os.path.join(self.dir, name)
        ext = base + ".ext"
        with open(ext, "w") as f:
            f.write("subjectAltName=%s\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n" % san)
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", base + ".key", "-out", base + ".csr", "-subj", "/CN=" + name, cwd=self.dir)
        _openssl("x509", "-req", "-in", base + ".csr", "-CA", self.cert, "-CAkey", self._key,
                 "-CAcreateserial", "-days", "2", "-out", base + ".pem", "-extfile", ext, cwd=self.dir)
        return base + ".pem", base + ".key"


class HttpsProvider(Provider):
    """The provider simulator behind TLS. url() gives https://localhost:PORT."""

    def __init__(self, cert, key):
        super().__init__()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        # The handshake happens in the handler thread, not in accept().
        self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True,
                                              do_handshake_on_connect=False)
        # A client refusing our certificate is an expected outcome in the tests.
        self._server.handle_error = lambda request, address: None

    def url(self, path, host="localhost"):
        return "https://%s:%d%s" % (host, self.port, path)
