"""npm packages for the Node client tests, installed by the tests themselves
on first use into a directory under the build tree (IDEMGATE_NODE_DIR, set by
tests/integration/CMakeLists.txt; gitignored), one directory per package set
so that pinned versions never mix. No npm is a failure, never a skip."""
import fcntl
import json
import os
import shutil
import subprocess
import tempfile

# Pinned: the versions the client guide (docs/clients.md) was tested with.
UNDICI_6 = ["undici@6.29.1"]
UNDICI_7 = ["undici@7.30.2"]
STRIPE = ["stripe@23.1.0", "https-proxy-agent@9.1.0"]
OPENAI = ["openai@6.49.0", "undici@7.30.2"]
MCP = ["@modelcontextprotocol/sdk@1.32.2", "undici@7.30.2"]

# Proxies set by the environment the tests run in must not reroute npm or clients.
CLEAN_ENV = {k: v for k, v in os.environ.items()
             if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
CLEAN_ENV.update({"NO_PROXY": "", "no_proxy": ""})


def node():
    path = shutil.which("node")
    if not path:
        raise AssertionError("node (Node 20) is not installed (scripts/packages.txt)")
    return path


def node_modules(name, packages):
    """The node_modules directory holding `packages` (npm specs), installed
    into IDEMGATE_NODE_DIR/name unless a previous run left exactly them."""
    base = os.environ.get("IDEMGATE_NODE_DIR") or os.path.join(tempfile.gettempdir(), "idemgate-node")
    directory = os.path.join(base, name)
    os.makedirs(directory, exist_ok=True)
    stamp = os.path.join(directory, "installed.json")
    # Tests run in parallel under ctest -j: one installer per directory.
    with open(os.path.join(directory, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(stamp) as f:
                if json.load(f) == packages:
                    return os.path.join(directory, "node_modules")
        except (OSError, ValueError):
            pass
        npm = shutil.which("npm")
        if not npm:
            raise AssertionError("npm is not installed: the Node client tests need `npm install %s` "
                                 "(install nodejs and npm, scripts/packages.txt)" % " ".join(packages))
        out = subprocess.run([npm, "install", "--no-save", "--no-audit", "--no-fund", "--no-package-lock",
                              "--prefix", directory] + packages,
                             capture_output=True, timeout=600, env=CLEAN_ENV)
        if out.returncode != 0:
            raise AssertionError("npm install %s failed:\n%s" % (" ".join(packages),
                                                                out.stderr.decode(errors="replace")))
        with open(stamp, "w") as f:
            json.dump(packages, f)
    return os.path.join(directory, "node_modules")


def run_node(script, args, modules, env=None, timeout=120):
    """Runs `script` (a file path) with NODE_PATH=modules; returns the
    CompletedProcess. The scripts print one JSON document on stdout."""
    full = dict(CLEAN_ENV, NODE_PATH=modules, **(env or {}))
    return subprocess.run([node(), script] + list(args), capture_output=True, timeout=timeout, env=full)
