"""Shared set-up for the unknown-outcome tests: a config builder with one
tool per case, the assertions every wait answer and escalation package must
pass, and an agent that keeps retrying the way SDK retry loops do."""
import http.client
import os
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from enforce_common import call, escalations, ledger_url, new_run, ops  # noqa: E402,F401
from harness import Proxy, wait_until  # noqa: E402,F401

CHARGE = {"amount": 1000, "currency": "eur", "customer": "cus_unknown"}

# Members every escalation package carries (the SDK-facing `error` member is
# checked by the tests of the problem body itself).
PACKAGE_MEMBERS = ("terminal", "question_for_human", "reason_code", "tool", "run", "fingerprint",
                   "idempotency_key", "attempts", "bound", "tools_tried", "trace_id")


def tool(name, path, port, effect="money", mode="same_key", bound=2, ttl="15m", inline=None, settle=None,
         honoured=None, retry_after=None, max_retry_after=None):
    """One tool on POST 127.0.0.1:port/path; query mode looks the key up at
    /v1/charges/search. inline=None leaves reconcile.inline at its default."""
    idem = "{ header: Idempotency-Key, mode: inject%s }" % (
        "" if honoured is None else ", honoured: %s" % ("true" if honoured else "false"))
    retry = "bound: %d" % bound
    if retry_after:
        retry += ", retry_after: %s" % retry_after
    if max_retry_after:
        retry += ", max_retry_after: %s" % max_retry_after
    reconcile = "mode: %s, ttl: %s" % (mode, ttl)
    if inline is not None:
        reconcile += ", inline: %s" % inline
    if mode == "query":
        reconcile += (', settle: %s, query: { method: GET, url: "http://127.0.0.1:%d/v1/charges/search?key={key}",'
                      ' found: /data/0 }' % (settle or "1s", port))
    return ("  - name: {name}\n"
            "    match: {{ host: 127.0.0.1, port: {port}, method: POST, path: {path} }}\n"
            "    effect: {effect}\n"
            "    idempotency: {idem}\n"
            "    retry: {{ {retry} }}\n"
            "    reconcile: {{ {reconcile} }}\n"
            "    receipt: /id\n").format(name=name, port=port, path=path, effect=effect, idem=idem, retry=retry,
                                         reconcile=reconcile)


def config(ledger, tools, listen="127.0.0.1:0", connect="1s", response="1s", idle="10s", drain="10s",
           outcome_record=None, fingerprint_key_file=None):
    """outcome_record=None leaves it at its default; an attempt's lease is
    connect + idle + response + outcome_record of the process that began it.
    Processes sharing one PostgreSQL ledger must share fingerprint_key_file
    (by default each has its own ./var/fingerprint.key)."""
    timeouts = "client_header: 5s, upstream_connect: %s, upstream_response: %s, idle: %s, drain: %s" % (
        connect, response, idle, drain)
    if outcome_record:
        timeouts += ", outcome_record: %s" % outcome_record
    key = ', fingerprint_key_file: "%s"' % fingerprint_key_file if fingerprint_key_file else ""
    return ("listen: {listen}\nthreads: 2\n"
            "ledger: {{ url: \"{ledger}\"{key} }}\n"
            "egress: {{ allow_hosts: [\"*\"], allow_loopback: true, allow_private: true }}\n"
            "timeouts: {{ {timeouts} }}\n"
            "runs: {{ budget: 100000 }}\n"
            "tools:\n").format(listen=listen, ledger=ledger, timeouts=timeouts, key=key) + "".join(tools)


def shared_key_file():
    """A fingerprint key path for processes that share one ledger (created
    by the first of them)."""
    return os.path.join(tempfile.mkdtemp(prefix="idemgate-key-"), "fingerprint.key")


def free_port():
    """A loopback port nothing listens on now, for processes that must share
    one explicit port (SO_REUSEPORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def retry_after_s(answer, cap=1.0):
    """How long an agent waits before its next try: the answer's Retry-After,
    capped so tests stay short (retrying early is always safe here)."""
    try:
        return min(float(answer.header("retry-after") or 0.1), cap)
    except ValueError:
        return 0.1


def retry_until_settled(proxy, url, body, run, deadline_s, headers=None, on_answer=None, resets_ok=False):
    """An agent that keeps retrying while told to wait (409/429 with
    decision wait); returns the first other answer. resets_ok: a connection
    refused or reset (a process going away) is retried too."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            answer = call(proxy, "POST", url, body, headers, run, timeout=60)
        except (ConnectionError, http.client.HTTPException):
            if not resets_ok or time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # the agent's back-off before reconnecting
            continue
        if on_answer:
            on_answer(answer)
        if answer.status not in (409, 429) or answer.header("idemgate-decision") != "wait":
            return answer
        if time.monotonic() > deadline:
            raise AssertionError("still told to wait after %.0f s: %s %s" % (deadline_s, answer.status, answer.body))
        time.sleep(retry_after_s(answer))  # the agent honours Retry-After (capped)


def dispatch_in_background(proxy, url, body, run, provider):
    """Sends one request from its own thread and returns once the provider
    has it: (thread, result); result gets "answer" and "at" (when the answer
    came back)."""
    result = {}

    def send():
        result["answer"] = call(proxy, "POST", url, body, run=run, timeout=60)
        result["at"] = time.monotonic()

    t = threading.Thread(target=send)
    t.start()
    wait_until(lambda: provider.writes(), 10, "the request to reach the provider")
    return t, result


class UnknownAssertions:
    def assert_wait(self, answer, reason, status=409):
        """A wait answer (SPEC section 4): safe to retry, and says so."""
        self.assertEqual(answer.status, status, answer.body)
        self.assertEqual(answer.header("content-type"), "application/problem+json", answer.body)
        problem = answer.json()
        self.assertEqual(problem["reason_code"], reason, problem)
        self.assertEqual(answer.header("idemgate-decision"), "wait")
        self.assertTrue(answer.header("idemgate-class"), "a wait answer without Idemgate-Class")
        self.assertTrue(answer.header("idemgate-key"))
        self.assertTrue(answer.header("retry-after"), "a wait answer without Retry-After")
        self.assertGreaterEqual(float(problem["retry_after_s"]), 0)
        if status == 409:
            self.assertEqual(answer.header("stripe-should-retry"), "true")
        self.assertNotIn("nothing was sent", answer.body.decode().lower())
        return problem

    def assert_unknown_package(self, answer, reason="money_unknown"):
        """An unknown that cannot be reconciled: 422 and the whole package."""
        self.assertEqual(answer.status, 422, answer.body)
        self.assertEqual(answer.header("content-type"), "application/problem+json", answer.body)
        problem = answer.json()
        self.assertEqual(problem["reason_code"], reason, problem)
        for member in PACKAGE_MEMBERS:
            self.assertIn(member, problem)
        self.assertEqual(problem["terminal"], "escalate")
        self.assertTrue(problem["idempotency_key"])
        self.assertEqual(answer.header("idemgate-decision"), "refused")
        self.assertTrue(answer.header("idemgate-class"))
        self.assertEqual(answer.header("stripe-should-retry"), "false")
        self.assertNotIn("nothing was sent", answer.body.decode().lower())
        return problem

    def assert_only_the_owner_dispatched(self, provider, first, answer, waits):
        """The process that began the attempt answered it; the agent's retries
        through another process were told to wait, then got the same charge,
        and nothing was looked up or re-sent while the owner held the attempt."""
        self.assertEqual(first["answer"].status, 200, first["answer"].body)
        self.assertEqual(first["answer"].header("idemgate-decision"), "forwarded")
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.json()["id"], first["answer"].json()["id"])
        self.assertEqual(len(provider.effects_snapshot()), 1, provider.effects_snapshot())
        self.assertEqual(len(provider.writes()), 1, "the live attempt was re-sent")
        early = [s for s in provider.searches() if s[0] < first["at"]]
        self.assertEqual(early, [], "another process reconciled an attempt its owner still held")
        for w in waits:
            self.assert_wait(w, "in_flight")

    def open_escalations(self, proxy, run, reason=None):
        return [e for e in escalations(proxy) if e["run"] == run and e["state"] == "open"
                and (reason is None or e["reason_code"] == reason)]


class LedgerBackend:
    """Mixin: subclasses set BACKEND ("sqlite" or "postgresql")."""
    BACKEND = "sqlite"

    def ledger_for(self, directory):
        return ledger_url(self.BACKEND, directory)

    def start_proxy(self, tools, env=None, **timeouts):
        proxy = Proxy("", env=env)
        with open(proxy.config_path, "w") as f:
            f.write(config(self.ledger_for(proxy.dir), tools, **timeouts))
        proxy.start()
        self.addCleanup(proxy.stop)
        return proxy
