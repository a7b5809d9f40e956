"""MCP edge cases through idemgate against a small scripted Streamable HTTP
server that records every tools/call it ran (so duplicates are counted):
- a JSON-RPC batch to an endpoint with MCP tools is refused, never passed on,
  and so are a message that names a member twice, one the gate cannot read
  (whatever its Mcp-Method/Mcp-Name headers say) and a POST that is not JSON;
- an upper-case Content-Type is still read as a tools/call and guarded;
- a 200 with no JSON-RPC response to the call (an SSE stream closed after a
  priming event) is an unknown outcome, never "completed";
- a 404 JSON-RPC error (session not found) means the tool did not run: the
  client's retry after re-initialising is sent, not refused;
- a session id is never replayed, not even for a tool without mcp_tool."""
import json
import os
import sys
import threading
import unittest
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.dirname(__file__))
from enforce_common import call, new_run  # noqa: E402
from harness import Proxy  # noqa: E402
from upstream import ServerThread  # noqa: E402

CONFIG = """\
listen: 127.0.0.1:0
threads: 2
ledger: {{ url: "sqlite:./ledger.db" }}
egress: {{ allow_hosts: ["*"], allow_loopback: true }}
timeouts: {{ client_header: 5s, upstream_connect: 2s, upstream_response: 5s, idle: 10s, drain: 5s }}
tools:
  - name: desk.create_ticket
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /mcp, mcp_tool: create_ticket }}
    effect: write
    idempotency: {{ honoured: false }}
    reconcile: {{ mode: none }}
  - name: desk.plain_write
    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: /plain }}
    effect: write
    idempotency: {{ honoured: false }}
    reconcile: {{ mode: none }}
"""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body, content_type="application/json", headers=()):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        owner = self.server.owner
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/plain":
            owner.ran("plain")
            self.answer(200, '{"ok":true}', headers=[("Mcp-Session-Id", "first-session")])
            return
        message = json.loads(body)
        if isinstance(message, list):
            for m in message:
                owner.ran(m["params"]["arguments"]["title"])
            self.answer(200, json.dumps([{"jsonrpc": "2.0", "id": m["id"], "result": {"content": []}}
                                         for m in message]))
            return
        title = message["params"]["arguments"]["title"]
        mode = owner.next_mode()
        if mode == "session_gone":  # the transport refuses: the tool never runs
            self.answer(404, json.dumps({"jsonrpc": "2.0", "id": None,
                                         "error": {"code": -32001, "message": "Session not found"}}))
            return
        owner.ran(title)
        if mode == "priming_only":  # ran, then the stream ended before the response
            self.answer(200, "id: s1-1\nretry: 1000\ndata: \n\n", content_type="text/event-stream")
            return
        result = {"content": [{"type": "text", "text": "ticket " + title}]}
        self.answer(200, json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}),
                    headers=[("Mcp-Session-Id", "first-session")])


class McpServer(ServerThread):
    def __init__(self):
        super().__init__(_Handler)
        self.lock = threading.Lock()
        self.effects = []
        self.modes = []

    def ran(self, title):
        with self.lock:
            self.effects.append(title)

    def next_mode(self):
        with self.lock:
            return self.modes.pop(0) if self.modes else "ok"

    def count(self, title):
        with self.lock:
            return self.effects.count(title)


def tools_call(title, id_, name="create_ticket"):
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call",
            "params": {"name": name, "arguments": {"title": title}}}


ACCEPT = {"Accept": "application/json, text/event-stream"}


class McpEdgesTest(unittest.TestCase):
    def setUp(self):
        self.server = McpServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        self.proxy = Proxy(CONFIG.format(port=self.server.port)).start()
        self.addCleanup(self.proxy.stop)
        self.run_id = new_run()

    def post(self, path, body, headers=None, session=None):
        h = dict(ACCEPT)
        if session:
            h["Mcp-Session-Id"] = session
        h.update(headers or {})
        return call(self.proxy, "POST", self.server.url(path), body, h, run=self.run_id)

    def assert_jsonrpc_refusal(self, answer, status, code, text):
        """A JSON-RPC error answer with that HTTP status and code, its message naming why; the message."""
        self.assertEqual(answer.status, status, answer.body)
        message = answer.json()
        self.assertEqual(message["error"]["code"], code, message)
        self.assertIn(text, message["error"]["message"])
        return message

    def test_batch_to_an_mcp_endpoint_is_refused(self):
        answer = self.post("/mcp", [tools_call("batched", 1), tools_call("batched", 2)])
        self.assert_jsonrpc_refusal(answer, 400, -32600, "batch")
        self.assertEqual(self.server.count("batched"), 0)

    def test_a_message_that_names_a_member_twice_is_refused(self):
        # Which tool it calls depends on the reader: the gate must not match
        # one while the server runs the other.
        body = (b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"delete_ticket",'
                b'"arguments":{"title":"twice"},"name":"create_ticket"}}')
        message = self.assert_jsonrpc_refusal(self.post("/mcp", body), 400, -32600, "names a member twice")
        self.assertEqual(message["id"], 9, message)
        self.assertEqual(self.server.count("twice"), 0)
        # Sent once, the same call goes through.
        once = self.post("/mcp", tools_call("twice", 10))
        self.assertEqual(once.status, 200, once.body)
        self.assertEqual(self.server.count("twice"), 1)

    def test_a_message_the_gate_cannot_read_is_refused_whatever_its_headers_say(self):
        # NaN is no JSON, but Python's json (this server) reads it: the
        # headers must not decide alone which tool a laxer server runs.
        body = (b'{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"create_ticket",'
                b'"arguments":{"title":"nan","n":NaN}}}')
        for headers in ({}, {"Mcp-Method": "tools/call", "Mcp-Name": "create_ticket"}):
            with self.subTest(headers=headers):
                self.assert_jsonrpc_refusal(self.post("/mcp", body, headers), 400, -32700, "not JSON idemgate reads")
        self.assertEqual(self.server.count("nan"), 0)

    def test_a_post_that_is_not_json_is_refused_at_an_mcp_endpoint(self):
        # This server reads the body whatever its type: passed on, the call
        # would run unguarded (no MCP tool matches a message not read).
        body = json.dumps(tools_call("plain-typed", 12)).encode()
        for content_type in ("text/plain", "application/x-www-form-urlencoded"):
            with self.subTest(content_type=content_type):
                self.assert_jsonrpc_refusal(self.post("/mcp", body, {"Content-Type": content_type}), 415, -32600,
                                            "is not JSON")
        self.assertEqual(self.server.count("plain-typed"), 0)

    def test_upper_case_content_type_is_guarded(self):
        body = json.dumps(tools_call("shouted", 1)).encode()
        first = self.post("/mcp", body, {"Content-Type": "Application/JSON; charset=UTF-8"})
        second = self.post("/mcp", json.dumps(tools_call("shouted", 2)).encode(),
                           {"Content-Type": "APPLICATION/JSON"})
        self.assertEqual(first.header("idemgate-decision"), "forwarded", first.body)
        self.assertEqual(second.header("idemgate-decision"), "replayed", second.body)
        self.assertEqual(second.json()["id"], 2)
        self.assertEqual(self.server.count("shouted"), 1)

    def test_ok_status_without_a_response_is_unknown(self):
        self.server.modes = ["priming_only"]
        first = self.post("/mcp", tools_call("lost", 1))
        retry = self.post("/mcp", tools_call("lost", 2))
        for answer, id_ in ((first, 1), (retry, 2)):
            result = answer.json()
            self.assertEqual(result["id"], id_, result)
            self.assertTrue(result["result"]["isError"], result)
            self.assertEqual(result["result"]["structuredContent"]["reason_code"], "tool_outcome_unknown", result)
            self.assertEqual(answer.header("idemgate-decision"), "refused")
        self.assertEqual(self.server.count("lost"), 1)

    def test_session_not_found_is_retried_not_refused(self):
        self.server.modes = ["session_gone"]
        first = self.post("/mcp", tools_call("again", 1), session="expired")
        self.assertEqual(first.status, 404, first.body)
        self.assertEqual(first.header("idemgate-class"), "transient", first.headers)
        retry = self.post("/mcp", tools_call("again", 2), session="fresh")
        self.assertEqual(retry.status, 200, retry.body)
        self.assertFalse(retry.json()["result"].get("isError"), retry.body)
        self.assertEqual(retry.header("idemgate-decision"), "forwarded")
        self.assertEqual(self.server.count("again"), 1)

    def test_session_header_never_replayed(self):
        first = self.post("/mcp", tools_call("mine", 1), session="first-session")
        second = self.post("/mcp", tools_call("mine", 2), session="second-session")
        self.assertEqual(second.header("idemgate-decision"), "replayed")
        self.assertEqual(second.header("mcp-session-id"), "second-session")
        self.assertEqual(first.header("mcp-session-id"), "first-session")
        plain = [self.post("/plain", b'{"n":1}', {"Content-Type": "application/json"}) for _ in range(2)]
        self.assertEqual(plain[1].header("idemgate-decision"), "replayed")
        self.assertIsNone(plain[1].header("mcp-session-id"), plain[1].headers)
        self.assertEqual(self.server.count("plain"), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
