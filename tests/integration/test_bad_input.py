"""The bad-input catalogue of docs/SECURITY.md, one test per row.

Each case sends one kind of hostile input to the real daemon and checks
the answer (status, a JSON error that says what is wrong), and that nothing
else was affected: a well-behaved client is served meanwhile, every process
keeps its pid and restart count (`mcpbrokerctl status`), the audit trail
verifies, and what was recorded is what was sent.
"""
import base64
import json
import os
import re
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from broker import MCPBROKER, Broker, free_port, wait_for
from llmfixtures import KEY, PROVIDERS, FakeLLM, sse_events
from mcpfixtures import FIXTURES

BAD_MCP = os.path.join(FIXTURES, "bad_input_mcp.py")
MAX_BODY = 4096
HEADER_TIMEOUT = 2.0


def read_log(path):
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


class HttpFixture:
    """bad_input_mcp.py in one of its HTTP modes, logging to a file."""

    def __init__(self, mode, env=None):
        self.port = free_port()
        fd, self.log = tempfile.mkstemp(suffix=".log")
        os.close(fd)
        self.proc = subprocess.Popen(
            ["python3", BAD_MCP, mode, str(self.port)],
            env=dict(os.environ, BAD_INPUT_LOG=self.log, **(env or {})),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._up, timeout=10, what="fixture %s listening" % mode)
        self.url = "http://127.0.0.1:%d/mcp" % self.port

    def _up(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
            return True
        except OSError:
            return False

    def entries(self):
        return read_log(self.log)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(5)
        os.unlink(self.log)


class Bystander:
    """A well-behaved client asking for the tool list all along."""

    def __init__(self, b):
        self.b = b
        self.results = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            try:
                status, _, data = self.b.request("GET", "/api/v1/tools",
                                                 timeout=10)
                self.results.append(status if status == 200 else
                                    (status, data))
            except OSError as e:
                self.results.append(repr(e))
            self.stop.wait(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(15)
        if exc[0] is None:
            bad = [r for r in self.results if r != 200]
            assert not bad, "the bystander was not served: %r" % bad[:3]
            assert self.results, "the bystander made no request"


def raw_exchange(port, data, pause=0.0, timeout=10.0):
    """Send data (a list of chunks, pause seconds apart); read until the
    server closes or timeout.  Returns (bytes received, seconds, closed)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(timeout)
    start = time.monotonic()
    got = b""
    try:
        for i, chunk in enumerate(data):
            if i and pause:
                time.sleep(pause)
            try:
                s.sendall(chunk)
            except OSError:
                break
        while True:
            try:
                part = s.recv(65536)
            except socket.timeout:
                return got, time.monotonic() - start, False
            except ConnectionResetError:
                return got, time.monotonic() - start, True
            if not part:
                return got, time.monotonic() - start, True
            got += part
    finally:
        s.close()


def private_hosts_work():
    """Whether a process can get an /etc/hosts of its own (root, and
    mount namespaces allowed)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--mount", "sh", "-c",
                           "mount --bind /etc/hosts /etc/hosts"],
                          capture_output=True).returncode == 0


def parse_responses(data):
    """[(status, {lower-case header: value}, body)] from raw bytes."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers.setdefault(k.strip().lower(), v.strip())
        n = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:n]))
        data = rest[n:]
    return out


class BadInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.llm = FakeLLM()
        cls.dir = tempfile.mkdtemp()
        os.chmod(cls.dir, 0o755)
        cls.calls = os.path.join(cls.dir, "calls.log")
        open(cls.calls, "w").close()
        os.chmod(cls.calls, 0o666)
        os.environ["FAKE_LLM_KEY"] = KEY
        os.environ["BAD_INPUT_LOG"] = cls.calls
        cls.sess = HttpFixture("session", env={
            "BAD_INPUT_SESSION_ID": "s1 X-Injected: yes"})
        cls.params = HttpFixture("modern")
        cls.b = Broker(
            'provider "llm" { %s }\n'
            'provider "ol" { %s }\n'
            'server "echo" { command "python3" "%s" "stdio" '
            'env "BAD_INPUT_LOG" }\n'
            'server "sess" { url "%s" }\n'
            'server "params" { url "%s" }\n'
            'limits { max-body %d header-timeout %dms }\n'
            'allow tool "*"\n'
            % (PROVIDERS["openai"] % cls.llm.port,
               PROVIDERS["ollama"] % cls.llm.port, BAD_MCP, cls.sess.url,
               cls.params.url, MAX_BODY, int(HEADER_TIMEOUT * 1000)))
        cls.b.start()

    @classmethod
    def tearDownClass(cls):
        cls.b.stop()
        cls.sess.stop()
        cls.params.stop()
        cls.llm.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        self.llm.reset()
        self.before = self.b.processes()
        self.assertEqual({p["state"] for p in self.before.values()},
                         {"running"})

    def tearDown(self):
        """Nothing else affected: same processes, all servers ready, the
        audit trail intact."""
        self.assertEqual(self.b.processes(), self.before)
        status, doc = self.b.get("/readyz")
        self.assertEqual(status, 200, doc)
        self.assertIn("audit trail OK", self.b.ctl("audit", "verify").stdout)

    # -- requests and records --------------------------------------------
    def post(self, path, body, headers=None):
        if not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        status, hdrs, data = self.b.request(
            "POST", path, body, dict({"Content-Type": "application/json"},
                                     **(headers or {})))
        return status, hdrs, data

    def assert_json_error(self, status, headers, data, want_status, code,
                          words):
        self.assertEqual(status, want_status, data)
        self.assertEqual(headers.get("Content-Type",
                                     headers.get("content-type")),
                         "application/json")
        doc = json.loads(data)
        self.assertEqual(doc["error"]["code"], code)
        self.assertIn(words, doc["error"]["message"])
        return doc

    def connect(self, provider="llm"):
        status, _, data = self.post("/llmchat/connect",
                                    {"provider": provider})
        self.assertEqual(status, 200, data)

    def chat(self, message="go"):
        status, events = sse_events(self.b.port, "/llmchat/chat",
                                    {"message": message})
        self.assertEqual(status, 200, events)
        return events

    def audit_calls(self):
        rows = [json.loads(line) for line in self.b.ctl(
            "audit", "export", "--format", "jsonl").stdout.splitlines()]
        return [r["detail"] if isinstance(r["detail"], dict)
                else json.loads(r["detail"]) for r in rows
                if r["kind"] == "tool_call"]

    def server_calls(self):
        return read_log(self.calls)

    def raw(self, *chunks, pause=0.0, timeout=10.0):
        return raw_exchange(self.b.port, list(chunks), pause, timeout)

    # -- the catalogue ---------------------------------------------------
    def test_oversized_body(self):
        with Bystander(self.b):
            status, headers, data = self.post(
                "/llmchat/chat", {"message": "x" * (MAX_BODY + 100)})
            self.assert_json_error(status, headers, data, 413,
                                   "payload_too_large", "max-body")
            # Far beyond the limit libevent refuses it before we see it.
            got, _, closed = self.raw(
                b"POST /llmchat/chat HTTP/1.1\r\nHost: x\r\n"
                b"Content-Length: %d\r\n\r\n" % (MAX_BODY * 100))
            self.assertTrue(got.startswith(b"HTTP/1.1 413 "), got)
            self.assertTrue(closed)
            # The connection stays usable, and the refused body is not
            # read as a request of its own.
            smuggled = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
            body = smuggled * (MAX_BODY // len(smuggled) + 2)
            got, _, closed = self.raw(
                b"POST /llmchat/chat HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s"
                b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                b"Connection: close\r\n\r\n"
                % (len(body), body))
            self.assertTrue(closed)
            answers = parse_responses(got)
            self.assertEqual([a[0] for a in answers], [413, 200], got)
            self.assertEqual(json.loads(answers[1][2]), {"status": "ok"})

    def test_slow_headers(self):
        """A client trickling its headers, a byte at a time but never idle
        for header-timeout, is cut off once header-timeout has passed."""
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40
        with Bystander(self.b):
            got, took, closed = self.raw(*[head[i:i + 1]
                                           for i in range(len(head))],
                                         pause=0.25, timeout=15)
        self.assertTrue(closed)
        self.assertEqual(got, b"")
        self.assertLess(took, HEADER_TIMEOUT + 3)
        self.assertGreaterEqual(took, HEADER_TIMEOUT - 0.5)

    def test_slow_headers_after_an_answer(self):
        """On a kept-alive connection header-timeout runs from the previous
        answer: a second request trickled after a first that took most of
        header-timeout is cut off header-timeout after that answer."""
        s = socket.create_connection(("127.0.0.1", self.b.port))
        self.addCleanup(s.close)
        first = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        for i in range(len(first)):
            s.sendall(first[i:i + 1])
            time.sleep(HEADER_TIMEOUT * 0.75 / len(first))
        s.settimeout(10)
        got = b""
        while b'"ok"' not in got:
            got += s.recv(4096)
        answered = time.monotonic()
        self.assertTrue(got.startswith(b"HTTP/1.1 200"), got)
        second = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 80
        closed = None
        for i in range(len(second)):
            try:
                s.sendall(second[i:i + 1])
            except OSError:
                closed = time.monotonic()
                break
            if select.select([s], [], [], 0.25)[0]:
                try:
                    data = s.recv(4096)
                except ConnectionResetError:
                    data = b""
                self.assertEqual(data, b"")     # no answer, a close
                closed = time.monotonic()
                break
        self.assertIsNotNone(closed, "never cut off")
        self.assertGreaterEqual(closed - answered, HEADER_TIMEOUT - 0.5)
        self.assertLess(closed - answered, HEADER_TIMEOUT + 3)

    def test_slow_body(self):
        body = b'{"message":"' + b"a" * 100 + b'"}'
        head = (b"POST /llmchat/chat HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body))
        with Bystander(self.b):
            got, took, closed = self.raw(head, *[body[i:i + 1]
                                                 for i in range(len(body))],
                                         pause=0.25, timeout=15)
        self.assertTrue(closed)
        self.assertEqual(got, b"")
        self.assertLess(took, HEADER_TIMEOUT + 3)

    def test_bad_chunked_encoding(self):
        """Malformed chunks never reach us: libevent answers itself (with
        413, its code for any body it cannot read) and closes."""
        with Bystander(self.b):
            for chunks in (b"zz\r\nhello\r\n0\r\n\r\n",
                           b"5;ext\r\nhello\r\n0\r\n\r\n",
                           b"-5\r\nhello\r\n0\r\n\r\n"):
                got, _, closed = self.raw(
                    b"POST /llmchat/chat HTTP/1.1\r\nHost: x\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n" + chunks +
                    b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                replies = parse_responses(got)
                self.assertEqual([r[0] for r in replies], [413], got)
                self.assertTrue(closed)

    def test_chunked_body_refused(self):
        """A well-formed chunked body is refused (411), any other coding
        too (400); either way the connection closes, so what followed the
        body is never taken for a request."""
        smuggled = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        with Bystander(self.b):
            for te, status, code in ((b"chunked", 411, "length_required"),
                                     (b"gzip, chunked", 400, "bad_framing"),
                                     (b"identity", 400, "bad_framing")):
                got, _, closed = self.raw(
                    b"POST /llmchat/connect HTTP/1.1\r\nHost: x\r\n"
                    b"Transfer-Encoding: " + te + b"\r\n\r\n"
                    b"2\r\n{}\r\n0\r\n\r\n" + smuggled)
                replies = parse_responses(got)
                self.assertEqual(len(replies), 1, got)
                st, hdrs, body = replies[0]
                self.assertEqual(st, status, got)
                self.assertEqual(hdrs["connection"], "close")
                self.assertEqual(json.loads(body)["error"]["code"], code)
                self.assertIn("Content-Length",
                              json.loads(body)["error"]["message"])
                self.assertTrue(closed)

    def test_content_length_with_transfer_encoding(self):
        """RFC 9112 6.1: refused, and the connection closed, whatever the
        body hides.  Debian's libevent refuses it itself (HTML); a build
        that lets it through meets framing_ok (JSON)."""
        smuggled = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
        with Bystander(self.b):
            for head in (b"Content-Length: 4\r\nTransfer-Encoding: chunked",
                         b"Transfer-Encoding: chunked\r\nContent-Length: 4",
                         b"Content-Length: 2\r\nTransfer-Encoding: identity",
                         b"Transfer-Encoding: chunked\r\n"
                         b"Transfer-Encoding: identity"):
                got, _, closed = self.raw(
                    b"POST /llmchat/connect HTTP/1.1\r\nHost: x\r\n" +
                    head + b"\r\n\r\n2\r\n{}\r\n0\r\n\r\n" + smuggled)
                replies = parse_responses(got)
                self.assertEqual(len(replies), 1, got)
                status, headers, body = replies[0]
                self.assertEqual(status, 400)
                self.assertEqual(headers["connection"], "close")
                if headers["content-type"] == "application/json":
                    self.assertIn("Transfer-Encoding", json.loads(body)[
                        "error"]["message"])
                self.assertTrue(closed)

    def test_bad_content_length(self):
        with Bystander(self.b):
            for head in (b"Content-Length: +2\r\n",
                         b"Content-Length: 2\r\nContent-Length: 2\r\n",
                         b"Content-Length: 2\r\nContent-Length: 3\r\n",
                         b"Content-Length : 2\r\n",
                         b"Content-Length\t: 2\r\n"):
                got, _, closed = self.raw(
                    b"POST /llmchat/connect HTTP/1.1\r\nHost: x\r\n" + head +
                    b"\r\n{}")
                replies = parse_responses(got)
                self.assertEqual([r[0] for r in replies], [400], got)
                self.assertEqual(json.loads(replies[0][2])["error"]["code"],
                                 "bad_framing")
                self.assertTrue(closed)

    def test_invalid_utf8_in_json(self):
        with Bystander(self.b):
            for body in (b'{"message":"caf\xe9"}', b'{"message":"\xff"}',
                         b'{"message":"\xed\xa0\x80"}',      # surrogate
                         b'{"message":"..\xc0\xaf.."}',       # overlong /
                         b'{"message":"\xf4\x90\x80\x80"}'):  # > U+10FFFF
                status, headers, data = self.post("/llmchat/chat", body)
                self.assert_json_error(status, headers, data, 400,
                                       "invalid_json", "invalid UTF-8 at "
                                       "byte %d" % min(i for i, c in
                                                       enumerate(body)
                                                       if c >= 0x80))
        self.assertEqual(self.llm.requests(), [])

    def test_nul_in_json_body(self):
        """A raw NUL is not JSON (400); an escaped one is, and a field that
        C code reads as a string refuses it (422) rather than cut it."""
        self.connect()
        with Bystander(self.b):
            raw = b'{"message":"before\x00after"}'
            status, headers, data = self.post("/llmchat/chat", raw)
            self.assert_json_error(status, headers, data, 400,
                                   "invalid_json", "a NUL byte at byte %d"
                                   % raw.index(b"\x00"))
            status, headers, data = self.post(
                "/llmchat/chat", {"message": "before\u0000after"})
            self.assert_json_error(status, headers, data, 422,
                                   "invalid_field", "NUL")
            status, headers, data = self.post(
                "/llmchat/connect", {"provider": "llm\u0000evil"})
            self.assertEqual(status, 422, data)
        self.assertEqual(self.llm.requests(), [])

    def test_nul_in_tool_argument(self):
        """The model's argument with a NUL reaches the server whole, and
        the audit trail has exactly what was sent."""
        self.connect()
        before = len(self.audit_calls())
        open(self.calls, "w").close()
        value = "before\u0000after"
        self.llm.script({"tool_calls": [{"name": "echo__record",
                                         "arguments": {"path": value}}]},
                        {"text": "done"})
        with Bystander(self.b):
            events = self.chat()
        self.assertEqual(events[-1][0], "final", events)
        sent = self.server_calls()
        self.assertEqual(sent, [{"tool": "record",
                                 "arguments": {"path": value}}])
        audited = self.audit_calls()[before:]
        self.assertEqual(len(audited), 1)
        self.assertEqual(audited[0]["arguments"], {"path": value})
        self.assertEqual(audited[0]["decision"], "allow")

    def test_deeply_nested_json(self):
        deep = '{"message":' + "[" * 100 + "]" * 100 + "}"
        with Bystander(self.b):
            status, headers, data = self.post("/llmchat/chat", deep)
            self.assert_json_error(status, headers, data, 400,
                                   "invalid_json", "nesting too deep")

    def test_deeply_nested_tool_arguments(self):
        """The model's over-deep arguments go back to it as an error; no
        server sees them."""
        self.connect()
        open(self.calls, "w").close()
        args = '{"a":' + "[" * 100 + "]" * 100 + "}"
        self.llm.script({"tool_calls": [{"name": "echo__record",
                                         "arguments": args}]},
                        {"text": "sorry"})
        with Bystander(self.b):
            events = self.chat()
        names = [e for e, _ in events]
        self.assertIn("tool_error", names)
        self.assertEqual(names[-1], "final")
        self.assertEqual(self.server_calls(), [])

    def test_huge_numbers_in_json(self):
        """NaN, Infinity, 1e999 and integers beyond 64 bits are refused
        before anyone reads them; -0 is a number like any other."""
        with Bystander(self.b):
            for text in ('{"provider":"llm","config":{"temperature":1e999}}',
                         '{"provider":"llm","config":{"temperature":NaN}}',
                         '{"provider":"llm","config":{"temperature":'
                         '-Infinity}}',
                         '{"provider":"llm","config":{"max_tokens":'
                         '18446744073709551616}}',
                         '{"provider":"llm","config":{"max_tokens":1.}}'):
                status, headers, data = self.post("/llmchat/connect", text)
                self.assert_json_error(status, headers, data, 400,
                                       "invalid_json", "not finite")
            status, headers, data = self.post(
                "/llmchat/connect", '{"provider":"llm","config":'
                '{"max_tokens":9223372036854775807}}')
            self.assert_json_error(status, headers, data, 422,
                                   "invalid_field", "max_tokens")
            status, _, data = self.post(
                "/llmchat/connect", '{"provider":"llm","config":'
                '{"temperature":-0,"max_tokens":1e0}}')
            self.assertEqual(status, 422, data)     # 1e0 is no integer
            status, _, data = self.post(
                "/llmchat/connect", '{"provider":"llm","config":'
                '{"temperature":-0.0}}')
            self.assertEqual(status, 200, data)
        self.llm.script({"text": "cold"})
        self.chat()
        self.assertEqual(self.llm.requests()[-1]["body"]["temperature"], 0)

    def test_huge_numbers_in_tool_arguments_and_usage(self):
        """Arguments with numbers that are not JSON go back to the model;
        exact ones reach the server and the audit alike.  A usage report
        beyond 64 bits does not upset the accounting."""
        self.connect()
        open(self.calls, "w").close()
        before = len(self.audit_calls())
        self.llm.script(
            {"tool_calls": [{"name": "echo__record",
                             "arguments": '{"n":1e999}'},
                            {"name": "echo__record",
                             "arguments": '{"n":18446744073709551616}'},
                            {"name": "echo__record",
                             "arguments": '{"n":-0,"m":9007199254740993,'
                                          '"x":-1.5e-300}'}],
             "usage": {"input": 2 ** 64, "output": 2 ** 63}},
            {"text": "done", "usage": {"input": 10 ** 30, "output": -1}})
        with Bystander(self.b):
            events = self.chat()
        self.assertEqual(events[-1][0], "final", events)
        self.assertEqual(len([e for e, _ in events if e == "tool_error"]), 2)
        want = {"n": 0, "m": 9007199254740993, "x": -1.5e-300}
        self.assertEqual(self.server_calls(), [{"tool": "record",
                                                "arguments": want}])
        audited = self.audit_calls()[before:]
        self.assertEqual([a["arguments"] for a in audited], [want])
        status, _, data = self.b.request("GET", "/llmchat/history")
        self.assertEqual(status, 200, data)

    def test_ten_thousand_argument_keys(self):
        """A call with 10,000 arguments runs within the limits, and is
        audited whole."""
        self.connect("ol")
        open(self.calls, "w").close()
        before = len(self.audit_calls())
        args = {"k%05d" % i: i for i in range(10000)}
        self.llm.script({"tool_calls": [{"name": "echo__record",
                                         "arguments": args}]},
                        {"echo_tool_result": True})
        with Bystander(self.b):
            events = self.chat()
        self.assertEqual(events[-1][0], "final", events[-1])
        self.assertIn("recorded 10000 keys", events[-1][1]["content"])
        self.assertEqual(self.server_calls()[0]["arguments"], args)
        audited = self.audit_calls()[before:]
        self.assertEqual(len(audited), 1)
        self.assertEqual(audited[0]["arguments"], args)

    def test_session_id_header_injection(self):
        """A server's Mcp-Session-Id that is not visible ASCII is not
        echoed: the session goes on without it, and no request to the
        server ever carries it (a bare CR: see SessionIdTest)."""
        self.b.wait_log(r"server sess: ignoring a malformed Mcp-Session-Id")
        with Bystander(self.b):
            r = self.b.ctl("server", "call", "sess", "echo",
                           '{"text":"still works"}')
        self.assertIn("still works", r.stdout)
        posts = [e for e in self.sess.entries() if e.get("method") == "POST"]
        self.assertGreaterEqual(len(posts), 3)
        for e in posts:
            names = [k.lower() for k, _ in e["headers"]]
            self.assertNotIn("x-injected", names)
            self.assertNotIn("mcp-session-id", names)

    def test_huge_http_answer(self):
        """An HTTP server's answer over 16 MiB fails that call alone."""
        with Bystander(self.b):
            r = self.b.ctl("server", "call", "params", "lookup",
                           '{"region":"huge"}', check=False)
            self.assertIn("the response is larger than 16 MiB",
                          r.stdout + r.stderr)
            r = self.b.ctl("server", "call", "params", "lookup",
                           '{"region":"eu"}')
            self.assertIn("eu", r.stdout)

    def test_param_header_injection(self):
        """x-mcp-header values with CR/LF go base64-encoded; one too long
        to fit is left out, never sent cut or raw."""
        evil = "eu\r\nX-Injected: yes"
        long_evil = "\r\nX-Injected: yes " + "a" * 1200
        seen = len(self.params.entries())   # other tests call it too
        with Bystander(self.b):
            for value in (evil, long_evil):
                r = self.b.ctl("server", "call", "params", "lookup",
                               json.dumps({"region": value}))
                self.assertIn("X-Injected", r.stdout)
        calls = [e for e in self.params.entries()[seen:] if
                 e.get("method") == "POST" and e.get("rpc") == "tools/call"]
        self.assertEqual(len(calls), 2)
        for e in calls:
            self.assertNotIn("x-injected", [k.lower() for k, _ in
                                            e["headers"]])
        h = dict((k.lower(), v) for k, v in calls[0]["headers"])
        self.assertTrue(h["mcp-param-region"].startswith("=?base64?"))
        self.assertEqual(base64.b64decode(h["mcp-param-region"][9:-2]),
                         evil.encode())
        self.assertNotIn("mcp-param-region",
                         [k.lower() for k, _ in calls[1]["headers"]])

    def test_config_header_injection(self):
        """Header values from the configuration with a control character
        are refused by mcpbroker -n, as at start and reload: an escaped
        newline by the header check, raw ones by the lexer."""
        conf = os.path.join(self.dir, "hdr.conf")
        for value, why in (("a\\r\\nX-Injected: yes", "unknown escape"),
                           ("a\\nX-Injected: yes", 'header "X-A": value '
                            "contains a control character"),
                           ("a\rX-Injected: yes", "control character 0x0d"),
                           ("a\x1b[2J", "control character 0x1b")):
            with open(conf, "w") as f:
                f.write('listen on 127.0.0.1 port 1\n'
                        'server "s" { url "http://127.0.0.1:1/mcp" '
                        'header "X-A" "%s" }\n' % value)
            r = subprocess.run([MCPBROKER, "-n", "-f", conf],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 1, value)
            self.assertIn("hdr.conf:2: ", r.stderr)
            self.assertIn(why, r.stderr)

    def test_response_headers_never_echo_input(self):
        """Nothing of the request goes into our response headers: CR/LF in
        the path or a header value forges none."""
        with Bystander(self.b):
            got, _, _ = self.raw(
                b"GET /llmchat/status/x%0d%0aSet-Cookie:%20a=b HTTP/1.1\r\n"
                b"Host: x\r\nConnection: close\r\n\r\n")
            got2, _, _ = self.raw(
                b"GET /auth/session HTTP/1.1\r\nHost: x\r\n"
                b"Origin: http://x\rSet-Cookie: a=b\r\n"
                b"Connection: close\r\n\r\n")
        for data in (got, got2):
            replies = parse_responses(data)
            self.assertEqual(len(replies), 1, data)
            status, headers, _ = replies[0]
            self.assertNotIn("set-cookie", headers)
            self.assertNotIn(b"a=b", data.partition(b"\r\n\r\n")[0])

    def test_path_traversal(self):
        """The static handler serves names out of the table compiled into
        the daemon, never a file: dot segments, encoded slashes and NULs
        are refused (400) before it, and anything it does not know, even
        an asset's unhashed name, is 404.  The frontend cannot open a file
        at all (seccomp)."""
        status, _, page = self.b.request("GET", "/")
        self.assertEqual(status, 200)
        asset = re.search(rb'/assets/chat\.[0-9a-f]{12}\.js', page).group(0)
        paths = ["/../etc/passwd", "/%2e%2e/etc/passwd", "//etc/passwd",
                 "/%2E%2e/%2e%2E/etc/passwd", "/assets/..%2f..%2fetc/passwd",
                 "/assets/../assets/" + asset.decode()[8:],
                 "/assets/%2e%2e/%2e%2e/etc/passwd", "/assets//etc/passwd",
                 "/assets/chat.js%00.png", "/assets\\..\\etc\\passwd",
                 "/llmchat/../api/v1/tools", "/api/v1/./tools",
                 "/llmchat/status/%00", "/api/v1//tools", "/./admin",
                 "/admin/..", "/assets/./" + asset.decode()[8:]]
        with Bystander(self.b):
            for path in paths:
                got, _, _ = self.raw(b"GET " + path.encode() +
                                     b" HTTP/1.1\r\nHost: x\r\n"
                                     b"Connection: close\r\n\r\n")
                replies = parse_responses(got)
                self.assertEqual(len(replies), 1, path)
                status, headers, body = replies[0]
                self.assertEqual(status, 400, path)
                self.assertEqual(headers["content-type"], "application/json")
                self.assertNotIn(b"root:", body)
            for path in ["/index.html", "/assets/chat.js", "/assets/",
                         "/assets/mcpbroker.conf", "/etc/passwd",
                         "/assets/" + asset.decode()[8:] + "x",
                         "/admin/", "/assets/web_assets.c"]:
                status, _, body = self.b.request("GET", path)
                self.assertEqual(status, 404, path)
                self.assertNotIn(b"root:", body)
            status, _, _ = self.b.request("GET", asset.decode())
            self.assertEqual(status, 200)

    def test_log_injection(self):
        """A tool's argument full of line breaks and terminal escapes, sent
        back by the server as a log message and on its stderr, forges no
        log line and drives no terminal."""
        evil = "x\nmcpbroker: FORGED line\r\x1b[2J\x1b]0;title\x07\u009b31m"
        mark = len(self.b.log_lines)
        with Bystander(self.b):
            r = self.b.ctl("server", "call", "echo", "echo",
                           json.dumps({"text": evil}))
        self.assertIn("FORGED", r.stdout)
        # The server's log messages (worker, debug) and its stderr lines.
        self.b.wait_log(r"server echo: \[x\\nmcpbroker: FOR\] \"level\"")
        self.b.wait_log(r"server echo: \[info\] \"x\\nmcpbroker: FORGED line"
                        r".*\\xc2\\x9b31m\"")
        self.b.wait_log(r"stderr: mcpbroker: FORGED line.*\\xc2\\x9b31m")
        lines = self.b.log_lines[mark:]
        for line in lines:
            self.assertFalse(line.startswith("mcpbroker: FOR"), line)
            for c in ("\x1b", "\r", "\x07", "\u009b"):
                self.assertNotIn(c, line)


class SessionIdTest(unittest.TestCase):
    def test_session_id_with_a_bare_cr(self):
        """A response header with a bare CR is malformed: the server is
        down with that reason, nothing is echoed, the rest is served."""
        evil = HttpFixture("session")
        self.addCleanup(evil.stop)
        b = Broker('server "evil" { url "%s" }\n'
                   'server "echo" { command "python3" "%s" "stdio" }\n'
                   % (evil.url, BAD_MCP))
        self.addCleanup(b.stop)
        b.start(wait_ready=False)

        def servers():
            return {s["name"]: s for s in b.get("/readyz")[1]["servers"]}
        wait_for(lambda: servers()["echo"]["state"] == "ready", timeout=15,
                 what="echo ready")
        wait_for(lambda: "malformed response header field" in
                 servers()["evil"].get("error", ""), timeout=15,
                 what="evil refused")
        self.assertEqual(servers()["evil"]["state"], "down")
        r = b.ctl("server", "call", "echo", "echo", '{"text":"served"}')
        self.assertIn("served", r.stdout)
        for e in evil.entries():
            names = [k.lower() for k, _ in e["headers"]]
            self.assertNotIn("x-injected", names)
            self.assertNotIn("mcp-session-id", names)
        self.assertEqual({p["restarts"] for p in b.processes().values()},
                         {0})


class TokenTest(unittest.TestCase):
    def test_each_server_gets_its_own_token(self):
        """An HTTP server's bearer token goes to that server, in every
        request, and to no other server."""
        servers = {n: HttpFixture("modern") for n in ("a", "b")}
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        body = ""
        for name, fx in servers.items():
            self.addCleanup(fx.stop)
            path = os.path.join(tmp, name + ".token")
            with open(path, "w") as f:
                f.write("token-of-%s\n" % name)
            body += ('server "%s" { url "%s" bearer-token-file "%s" }\n'
                     % (name, fx.url, path))
        b = Broker(body)
        self.addCleanup(b.stop)
        b.start()
        for name in servers:
            r = b.ctl("server", "call", name, "lookup", '{"region":"eu"}')
            self.assertIn("eu", r.stdout)
        for name, fx in servers.items():
            auth = [[v for k, v in e["headers"] if k.lower() ==
                     "authorization"] for e in fx.entries()
                    if "headers" in e]
            self.assertGreaterEqual(len(auth), 2, name)
            self.assertEqual(auth, [["Bearer token-of-%s" % name]] *
                             len(auth), name)


class AddressTest(unittest.TestCase):
    """SSRF through the configuration: url and base-url may not point at
    link-local, metadata or unspecified addresses without allow-address,
    checked on the literal by mcpbroker -n and on the resolved address at
    every connect."""

    def check(self, body):
        b = Broker(body)
        self.addCleanup(b.stop)
        return subprocess.run([MCPBROKER, "-n", "-f", b.conf],
                              capture_output=True, text=True)

    def test_literal_addresses(self):
        refused = ["169.254.169.254", "169.254.1.1", "[fe80::1]",
                   "[fd00:ec2::254]", "0.0.0.0", "[::]",
                   "[::ffff:169.254.169.254]", "[64:ff9b::a9fe:a9fe]",
                   "100.100.100.200", "224.0.0.1"]
        for host in refused:
            url = "http://%s:8080/mcp" % host
            r = self.check('server "s" { url "%s" }' % url)
            self.assertEqual(r.returncode, 1, host)
            self.assertRegex(r.stderr, r"mcpbroker.conf:\d+: server \"s\": "
                                       r"url .* is .*allow-address")
            allow = host.strip("[]")
            r = self.check('server "s" { url "%s" allow-address "%s" }'
                           % (url, allow))
            self.assertEqual(r.returncode, 0, r.stderr)
            r = self.check('provider "p" { type ollama base-url '
                           '"http://%s:11434" model "m" }' % host)
            self.assertEqual(r.returncode, 1, host)
            self.assertIn("base-url", r.stderr)
        for host in ("127.0.0.1", "[::1]", "10.1.2.3", "172.16.0.1",
                     "192.168.1.1", "[fd12::1]", "example.com"):
            r = self.check('server "s" { url "http://%s/mcp" }\n'
                           'provider "p" { type ollama base-url '
                           '"http://%s:11434" model "m" }' % (host, host))
            self.assertEqual(r.returncode, 0, (host, r.stderr))
        r = self.check('server "s" { url "http://127.0.0.1/" '
                       'allow-address "metadata" }')
        self.assertEqual(r.returncode, 1)
        self.assertIn("not an IP address", r.stderr)
        r = self.check('server "s" { command "true" '
                       'allow-address "169.254.169.254" }')
        self.assertEqual(r.returncode, 1)
        self.assertIn("only valid with url", r.stderr)

    @unittest.skipUnless(private_hosts_work(),
                         "needs root and unshare(1) for a private /etc/hosts")
    def test_resolved_name(self):
        """A name that resolves to the metadata address passes -n (it is a
        name) but is refused at connect time, for servers and providers."""
        hosts = tempfile.NamedTemporaryFile("w", suffix=".hosts",
                                            delete=False)
        self.addCleanup(os.unlink, hosts.name)
        hosts.write("169.254.169.254 metadata.test\n"
                    "127.0.0.1 localhost allowed.test\n")
        hosts.close()
        os.chmod(hosts.name, 0o644)
        llm = FakeLLM()
        self.addCleanup(llm.stop)
        ok = HttpFixture("session", env={"BAD_INPUT_SESSION_ID": "s1"})
        self.addCleanup(ok.stop)
        body = ('provider "meta" { type ollama base-url '
                '"http://metadata.test:11434" model "m" }\n'
                'provider "ok" { type ollama base-url '
                '"http://allowed.test:%d" model "m" }\n'
                'server "meta" { url "http://metadata.test:8080/mcp" '
                'connect-timeout 1s }\n'
                'server "ok" { url "http://allowed.test:%d/mcp" }\n'
                'allow tool "*"\n' % (llm.port, ok.port))
        self.assertEqual(self.check(body).returncode, 0)
        b = Broker(body, wrap=["unshare", "--mount", "sh", "-c",
                               'mount --bind "$0" /etc/hosts && exec "$@"',
                               hosts.name])
        self.addCleanup(b.stop)
        b.start(wait_ready=False)

        def meta_state():
            doc = b.get("/readyz")[1]
            return {s["name"]: s for s in doc["servers"]}
        wait_for(lambda: meta_state()["ok"]["state"] == "ready",
                 timeout=15, what="server ok ready")
        wait_for(lambda: "allow-address" in meta_state()["meta"].get(
                 "error", ""), timeout=15, what="server meta refused")
        err = meta_state()["meta"]["error"]
        self.assertIn("169.254.169.254 is the cloud metadata address", err)
        for provider, want in (("meta", 503), ("ok", 200)):
            status, _, data = b.request("POST", "/llmchat/connect",
                                        json.dumps({"provider": provider}))
            self.assertEqual(status, 200, data)
            llm.script({"text": "hello"})
            status, doc = sse_events(b.port, "/llmchat/chat",
                                     {"message": "hi", "streaming": False})
            self.assertEqual(status, want, doc)
            if want == 503:
                self.assertIn("not connecting without allow-address",
                              doc["error"]["message"])
        self.assertEqual(len(llm.requests()), 1)
        procs = b.processes()
        self.assertEqual({p["restarts"] for p in procs.values()}, {0})


if __name__ == "__main__":
    unittest.main()
