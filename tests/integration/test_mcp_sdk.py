"""The official MCP TypeScript SDK (@modelcontextprotocol/sdk), client and
server over Streamable HTTP through idemgate: initialize, tools/list and
tools/call with JSON and with SSE answers; an identical second call (a new
JSON-RPC id) is replayed with the requester's own id and makes one ticket;
a server that creates the ticket and drops the connection gives the client
(and its retry) an isError result naming tool_outcome_unknown, one ticket;
two clients in one run never see each other's session."""
import json
import os
import subprocess
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from harness import Proxy, wait_until  # noqa: E402
from node_deps import CLEAN_ENV, MCP, node, node_modules, run_node  # noqa: E402

CLIENTS = os.path.join(os.path.dirname(__file__), "clients")

CONFIG = """\
listen: 127.0.0.1:0
threads: 2
ledger: {{ url: "sqlite:./ledger.db" }}
egress: {{ allow_hosts: ["*"], allow_loopback: true }}
timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 5s, idle: 10s, drain: 5s }}
tools:
  - name: desk.create_ticket_json
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /json, mcp_tool: create_ticket }}
    effect: write
    idempotency: {{ honoured: false }}
    reconcile: {{ mode: none }}
  - name: desk.create_ticket_sse
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /sse, mcp_tool: create_ticket }}
    effect: write
    idempotency: {{ honoured: false }}
    reconcile: {{ mode: none }}
  - name: desk.fail_ticket
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /json, mcp_tool: fail_ticket }}
    effect: write
    idempotency: {{ honoured: false }}
    reconcile: {{ mode: none }}
"""


class McpServer:
    def __init__(self, modules):
        self.dir = tempfile.mkdtemp(prefix="idemgate-mcp-")
        port_file = os.path.join(self.dir, "port")
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen([node(), os.path.join(CLIENTS, "mcp_server.js"), port_file],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(CLEAN_ENV, NODE_PATH=modules))

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("the MCP server exited early")
            return os.path.exists(port_file) and open(port_file).read().strip()

        self.port = int(wait_until(ready, 60, "the MCP server to listen"))

    def state(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/state" % self.port, timeout=10) as r:
            return json.loads(r.read())

    def drop_next(self):
        req = urllib.request.Request("http://127.0.0.1:%d/control" % self.port, data=b'{"drop_next": true}',
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


class McpSdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.modules = node_modules("mcp", MCP)

    def setUp(self):
        self.server = McpServer(self.modules)
        self.addCleanup(self.server.stop)
        self.proxy = Proxy(CONFIG.format(port=self.server.port)).start()
        self.addCleanup(self.proxy.stop)

    def clients(self, run, plan):
        out = run_node(os.path.join(CLIENTS, "mcp_client.js"),
                       [self.proxy.proxy_url(), "http://127.0.0.1:%d" % self.server.port, run, json.dumps(plan)],
                       self.modules, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        return json.loads(out.stdout)

    def tickets(self):
        return self.server.state()["tickets"]

    def check_replayed_call(self, path):
        steps = self.clients("run-" + path.strip("/"), [
            {"op": "connect", "client": "a", "path": path},
            {"op": "list", "client": "a"},
            {"op": "call", "client": "a", "tool": "create_ticket", "args": {"title": "printer " + path}},
            {"op": "call", "client": "a", "tool": "create_ticket", "args": {"title": "printer " + path}},
            {"op": "list", "client": "a"},
        ])
        connect, listed, first, second, listed_again = steps
        self.assertTrue(connect.get("session"), connect)
        self.assertIn("create_ticket", listed["tools"], listed)
        for call in (first, second):
            self.assertNotIn("error", call, call)  # an answer with a wrong id would time out
            self.assertFalse(call["result"].get("isError"), call)
        self.assertEqual(first["http"]["decision"], "forwarded", first)
        self.assertEqual(second["http"]["decision"], "replayed", second)
        self.assertEqual(second["http"]["replayed"], "true", second)
        want = "text/event-stream" if path == "/sse" else "application/json"
        self.assertTrue(second["http"]["content_type"].startswith(want), second)
        self.assertEqual(first["result"]["content"][0]["text"], second["result"]["content"][0]["text"])
        self.assertEqual(len([t for t in self.tickets() if t["title"] == "printer " + path]), 1)
        self.assertEqual(listed_again["session"], connect["session"])

    def test_json_answers_replayed_with_the_requesters_id(self):
        self.check_replayed_call("/json")

    def test_sse_answers_captured_and_replayed_as_sse(self):
        self.check_replayed_call("/sse")

    def test_mirrored_headers_of_2026_07_28_match_the_same_tool(self):
        steps = self.clients("run-mirror", [
            {"op": "connect", "client": "a", "path": "/json"},
            {"op": "call", "client": "a", "tool": "create_ticket", "args": {"title": "m"}, "mirror": True},
            {"op": "call", "client": "a", "tool": "create_ticket", "args": {"title": "m"}},
        ])
        self.assertEqual(steps[1]["http"]["decision"], "forwarded", steps)
        self.assertEqual(steps[2]["http"]["decision"], "replayed", steps)
        self.assertEqual(len([t for t in self.tickets() if t["title"] == "m"]), 1)

    def test_dropped_after_create_is_tool_outcome_unknown_one_ticket(self):
        self.server.drop_next()
        steps = self.clients("run-drop", [
            {"op": "connect", "client": "a", "path": "/json"},
            {"op": "call", "client": "a", "tool": "create_ticket", "args": {"title": "lost answer"}},
            {"op": "call", "client": "a", "tool": "create_ticket", "args": {"title": "lost answer"}},
        ])
        for call in steps[1:]:
            self.assertNotIn("error", call, call)
            result = call["result"]
            self.assertTrue(result["isError"], call)
            text = result["content"][0]["text"]
            self.assertIn("tool_outcome_unknown", text)
            self.assertIn("Question for a human", text)
            package = result["structuredContent"]
            self.assertEqual(package["reason_code"], "tool_outcome_unknown")
            self.assertIn(package["idempotency_key"], text)
            self.assertEqual(call["http"]["decision"], "refused")
        self.assertEqual(len([t for t in self.tickets() if t["title"] == "lost answer"]), 1)

    def test_tool_error_is_classified_and_not_resent(self):
        steps = self.clients("run-fail", [
            {"op": "connect", "client": "a", "path": "/json"},
            {"op": "call", "client": "a", "tool": "fail_ticket", "args": {"title": "x"}},
            {"op": "call", "client": "a", "tool": "fail_ticket", "args": {"title": "x"}},
        ])
        first, second = steps[1], steps[2]
        self.assertTrue(first["result"]["isError"], first)
        self.assertEqual(first["result"]["content"][0]["text"], "desk is read-only today")
        self.assertEqual(first["http"]["decision"], "forwarded")
        self.assertTrue(second["result"]["isError"], second)
        self.assertEqual(second["http"]["decision"], "refused")
        self.assertEqual(second["result"]["structuredContent"]["reason_code"], "validation_repeated")
        decisions = [e for e in self.proxy.log_lines() if e.get("event") == "decision" and e.get("run") == "run-fail"]
        self.assertEqual(decisions[0]["class"], "validation", decisions)
        calls = [r for r in self.server.state()["requests"] if r["method"] == "tools/call"]
        self.assertEqual(len(calls), 1, calls)

    def test_two_clients_never_see_each_others_session(self):
        steps = self.clients("run-shared", [
            {"op": "connect", "client": "a", "path": "/sse"},
            {"op": "connect", "client": "b", "path": "/sse"},
            {"op": "call", "client": "a", "tool": "create_ticket", "args": {"title": "shared"}},
            {"op": "call", "client": "b", "tool": "create_ticket", "args": {"title": "shared"}},
            {"op": "list", "client": "b"},
            {"op": "list", "client": "a"},
        ])
        a, b, call_a, call_b, list_b, list_a = steps
        self.assertNotEqual(a["session"], b["session"])
        self.assertEqual(call_b["http"]["decision"], "replayed", call_b)  # b got a's stored answer...
        self.assertEqual(call_b["session"], b["session"])                 # ...but kept its own session
        self.assertEqual(list_b["session"], b["session"])
        self.assertEqual(list_a["session"], a["session"])
        self.assertEqual(len([t for t in self.tickets() if t["title"] == "shared"]), 1)
        # What the server saw: after initialize, b only ever spoke in its own session.
        seen_b = [r["session"] for r in self.server.state()["requests"] if r["session"] not in (None, a["session"])]
        self.assertTrue(seen_b and all(s == b["session"] for s in seen_b), seen_b)
        after_a_call = [r for r in self.server.state()["requests"] if r["method"] == "tools/list"]
        self.assertEqual(sorted(r["session"] for r in after_a_call), sorted([a["session"], b["session"]]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
