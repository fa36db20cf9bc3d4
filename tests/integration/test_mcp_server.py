"""The broker as an MCP server: /mcp/TOOLSET over streamable HTTP.

Clients of both protocol eras against the real daemon fronting
server-everything (stdio, one instance per user): a 2025-06-18 client
spoken in raw HTTP here (sessions, SSE with event ids, resumption,
cancellation, DELETE), 2026-07-28 stateless requests, policy-filtered lists
per user, refusals on the audit trail, resources and prompts under policy,
and two real clients: @modelcontextprotocol/inspector-cli (2025 era) and
one built on the TypeScript SDK v2 (tests/fixtures/mcp_v2_client.mjs)."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from broker import MCPBROKER, Broker, wait_for
from mcpfixtures import FIXTURES, TESTS, everything_cmd, node, v2_cmd

LEGACY = "2025-06-18"
MODERN = "2026-07-28"
TOOLS_OF_DEV = ["everything.echo", "everything.get-sum",
                "everything.trigger-long-running-operation"]


def quote(cmd):
    return " ".join('"%s"' % a for a in cmd)


def config(cmd):
    quoted = quote(cmd)
    return ('auth { api-keys }\n'
            'server "everything" {\n command %s\n isolation per-user\n'
            ' call-timeout 60s\n}\n'
            'server "probe" { command "python3" "%s" isolation per-user }\n'
            'toolset "dev" { tools "everything.*" }\n'
            'toolset "who" { tools "probe.whoami" }\n'
            'server "v2" { command %s }\n'
            'toolset "v2" { tools "v2.*" }\n'
            'allow role "dev" tool "v2.*"\n'
            'allow role "dev" tool "probe.whoami"\n'
            'toolset "ide" { tools "everything.echo" "everything.get-sum"\n'
            ' names underscore }\n'
            'limits { tool-timeout 60s }\n'
            'deny tool "everything.get-env"\n'
            'confirm user "carol" tool "everything.get-tiny-image"\n'
            'allow user "carol" tool "everything.get-sum" rate 2/minute\n'
            'allow role "admin" tool "*"\n'
            'allow role "dev" tool "everything.echo" "everything.get-sum" '
            '"everything.trigger-long-running-operation"\n'
            'allow role "dev" resource '
            '"everything.demo://resource/static/document/*"\n'
            'allow role "dev" prompt "everything.simple-prompt"\n'
            'allow role "admin" resource "*"\n'
            'allow role "admin" prompt "*"\n'
            % (quoted, os.path.join(FIXTURES, "net_probe.py"),
               quote(v2_cmd("stdio"))))


def sse_events(text):
    """[(id, data-object)] of an event stream's text."""
    events = []
    for block in re.split(r"\r?\n\r?\n", text):
        eid, data = None, []
        for line in block.splitlines():
            if line.startswith("id:"):
                eid = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            events.append((eid, json.loads("\n".join(data))))
    return events


class Stream:
    """An open event stream read incrementally (a GET, or a POST's answer)."""

    def __init__(self, conn, response):
        self.conn = conn
        self.r = response
        self.status = response.status
        self.headers = {k.lower(): v for k, v in response.getheaders()}

    def next_event(self):
        """(id, message) of the next event with data; None at the end."""
        eid, data = None, []
        while True:
            line = self.r.readline()    # through the chunked coding
            if not line:
                return None
            line = line.decode().rstrip("\r\n")
            if line == "":
                if data:
                    return eid, json.loads("\n".join(data))
                continue
            if line.startswith("id:"):
                eid = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())

    def close(self):
        self.conn.close()


class McpServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.b = Broker(config(everything_cmd()))
        cls.b.start()
        cls.alice = cls.user("alice", "admin")
        cls.bob = cls.user("bob", "dev")
        cls.carol = cls.user("carol", "dev")

    @classmethod
    def tearDownClass(cls):
        cls.b.stop()

    @classmethod
    def user(cls, name, role):
        r = cls.b.ctl("user", "add", "-r", role, name)
        return r.stdout.strip().splitlines()[-1]

    # -- HTTP ------------------------------------------------------------
    def headers(self, key, session=None, version=None, sse=True, extra=None):
        h = {"Content-Type": "application/json",
             "Accept": "application/json, text/event-stream" if sse else
             "application/json"}
        if key is not None:
            h["Authorization"] = "Bearer " + key
        if session is not None:
            h["Mcp-Session-Id"] = session
        if version is not None:
            h["MCP-Protocol-Version"] = version
        h.update(extra or {})
        return h

    def post(self, key, msg, toolset="dev", **kw):
        """(status, headers, body): body is the JSON object, the events of
        an SSE answer as [(id, message)], or None."""
        body = msg if isinstance(msg, (bytes, str)) else json.dumps(msg)
        status, h, data = self.b.request("POST", "/mcp/" + toolset, body,
                                         self.headers(key, **kw), timeout=60)
        h = {k.lower(): v for k, v in h.items()}
        if h.get("content-type", "").startswith("text/event-stream"):
            return status, h, sse_events(data.decode())
        return status, h, json.loads(data) if data else None

    def open(self, method, key, toolset="dev", body=None, **kw):
        conn = http.client.HTTPConnection("127.0.0.1", self.b.port,
                                          timeout=30)
        conn.request(method, "/mcp/" + toolset, body=body,
                     headers=self.headers(key, **kw))
        return Stream(conn, conn.getresponse())

    def rpc(self, key, method, params=None, session=None, rid=1, **kw):
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        kw.setdefault("version", LEGACY if session else None)
        status, h, body = self.post(key, msg, session=session, **kw)
        if isinstance(body, list):      # an SSE answer: its last event
            body = [m for _, m in body if "id" in m][-1]
        return status, body

    def initialize(self, key, toolset="dev", version=LEGACY):
        status, h, body = self.post(key, {
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}},
            toolset=toolset)
        self.assertEqual(status, 200, body)
        sid = h["mcp-session-id"]
        status, _, _ = self.post(key, {"jsonrpc": "2.0",
                                       "method": "notifications/initialized"},
                                 toolset=toolset, session=sid,
                                 version=version)
        self.assertEqual(status, 202)
        return sid, body["result"]

    def tools(self, key, sid, toolset="dev"):
        status, body = self.rpc(key, "tools/list", {}, session=sid,
                                toolset=toolset)
        self.assertEqual(status, 200, body)
        return [t["name"] for t in body["result"]["tools"]]

    def modern(self, key, method, params=None, rid=1, headers=None,
               meta_version=MODERN, header_version=MODERN, toolset="dev"):
        params = dict(params or {})
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": meta_version,
            "io.modelcontextprotocol/clientInfo": {"name": "t",
                                                   "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}
        extra = {"Mcp-Method": method}
        if "name" in params or "uri" in params:
            extra["Mcp-Name"] = params.get("name", params.get("uri"))
        extra.update(headers or {})
        extra = {k: v for k, v in extra.items() if v is not None}
        return self.post(key, {"jsonrpc": "2.0", "id": rid, "method": method,
                               "params": params}, version=header_version,
                         extra=extra, toolset=toolset)

    def audit_rows(self):
        out = self.b.ctl("audit", "export", "--format", "jsonl").stdout
        return [json.loads(line) for line in out.splitlines()]

    # -- the 2025 era ----------------------------------------------------
    def test_legacy_session_initialize_call_delete(self):
        sid, result = self.initialize(self.bob)
        # >= 128 random bits, visible ASCII
        self.assertRegex(sid, r"^[A-Za-z0-9_-]{32}$")
        self.assertEqual(result["protocolVersion"], LEGACY)
        self.assertEqual(result["serverInfo"]["name"], "mcpbroker/dev")
        caps = result["capabilities"]
        self.assertTrue(caps["tools"]["listChanged"])
        self.assertIn("resources", caps)     # server-everything has them
        self.assertIn("prompts", caps)
        status, body = self.rpc(self.bob, "ping", session=sid)
        self.assertEqual((status, body["result"]), (200, {}))
        # a call whose result is the first thing to say is answered as
        # JSON, though the client takes event streams (test_progress has
        # the stream, when something comes before the result)
        status, h, events = self.post(self.bob, {
            "jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "everything.echo",
                       "arguments": {"message": "hello"}}},
            session=sid, version=LEGACY)
        self.assertEqual(status, 200)
        self.assertEqual(h["content-type"], "application/json")
        self.assertEqual(events["id"], 5)
        self.assertEqual(events["result"]["content"][0]["text"],
                         "Echo: hello")
        # the same call answered as JSON for a client that takes no SSE
        status, body = self.rpc(self.bob, "tools/call", {
            "name": "everything.get-sum", "arguments": {"a": 2, "b": 3}},
            session=sid, sse=False)
        self.assertEqual(status, 200)
        self.assertIn("5", body["result"]["content"][0]["text"])
        # DELETE ends it
        status, _, _ = self.b.request("DELETE", "/mcp/dev", None,
                                      self.headers(self.bob, session=sid))
        self.assertEqual(status, 200)
        status, body = self.rpc(self.bob, "ping", session=sid)
        self.assertEqual(status, 404)
        self.assertEqual(body["error"]["code"], -32001)

    def test_calls_carry_the_callers_identity(self):
        """A per-user server: each user's calls reach their own instance."""
        def pid(key):
            status, h, body = self.modern(key, "tools/call", {
                "name": "probe.whoami", "arguments": {}}, toolset="who")
            msg = body[-1][1] if isinstance(body, list) else body
            return json.loads(msg["result"]["content"][0]["text"])["pid"]

        def legacy_pid(key):
            sid, _ = self.initialize(key, toolset="who")
            status, body = self.rpc(key, "tools/call", {
                "name": "probe.whoami", "arguments": {}}, session=sid,
                toolset="who")
            return json.loads(body["result"]["content"][0]["text"])["pid"]

        bob, carol = pid(self.bob), pid(self.carol)
        self.assertNotEqual(bob, carol)
        self.assertEqual(pid(self.bob), bob)
        self.assertEqual(legacy_pid(self.bob), bob)

    def test_requests_need_a_session(self):
        status, body = self.rpc(self.bob, "tools/list", {})
        self.assertEqual(status, 400)
        self.assertEqual(body["error"]["code"], -32600)
        status, body = self.rpc(self.bob, "tools/list", {},
                                session="x" * 32)
        self.assertEqual(status, 404)
        sid, _ = self.initialize(self.bob)
        status, body = self.rpc(self.bob, "tools/list", {}, session=sid,
                                version="1999-01-01")
        self.assertEqual(status, 400)
        # another toolset's endpoint does not know this session
        status, body = self.rpc(self.bob, "tools/list", {}, session=sid,
                                toolset="ide")
        self.assertEqual(status, 404)
        status, body = self.rpc(self.bob, "tools/list", {}, toolset="nope")
        self.assertEqual(status, 404)
        status, body = self.rpc(self.bob, "no/such", {}, session=sid)
        self.assertEqual((status, body["error"]["code"]), (200, -32601))

    def test_policy_filtered_lists_per_user(self):
        sid_b, _ = self.initialize(self.bob)
        sid_a, _ = self.initialize(self.alice)
        self.assertEqual(sorted(self.tools(self.bob, sid_b)),
                         sorted(TOOLS_OF_DEV))
        alice = self.tools(self.alice, sid_a)
        self.assertIn("everything.get-tiny-image", alice)
        self.assertNotIn("everything.get-env", alice)   # denied to all
        self.assertGreater(len(alice), len(TOOLS_OF_DEV))
        # another toolset, another naming style
        sid_i, _ = self.initialize(self.bob, toolset="ide")
        self.assertEqual(sorted(self.tools(self.bob, sid_i, "ide")),
                         ["everything__echo", "everything__get-sum"])
        status, body = self.rpc(self.bob, "tools/call", {
            "name": "everything__echo", "arguments": {"message": "x"}},
            session=sid_i, toolset="ide")
        self.assertEqual(body["result"]["content"][0]["text"], "Echo: x")

    def test_forged_and_hidden_calls_refused_and_audited(self):
        sid, _ = self.initialize(self.bob)
        status, body = self.rpc(self.bob, "tools/call", {
            "name": "everything.get-env", "arguments": {}}, session=sid)
        self.assertTrue(body["result"]["isError"])
        self.assertIn("refused by policy",
                      body["result"]["content"][0]["text"])
        status, body = self.rpc(self.bob, "tools/call", {
            "name": "everything.get-tiny-image", "arguments": {}},
            session=sid)
        self.assertTrue(body["result"]["isError"])
        status, body = self.rpc(self.bob, "tools/call", {
            "name": "nowhere.tool", "arguments": {}}, session=sid)
        self.assertTrue(body["result"]["isError"])
        self.assertIn("Unknown tool", body["result"]["content"][0]["text"])
        rows = [r for r in self.audit_rows() if r["user"] == "bob" and
                r["kind"] == "tool_call"]
        denied = {(r["detail"].get("tool") or r["detail"].get("name")):
                  r["detail"] for r in rows
                  if r["detail"]["decision"] == "deny"}
        for name in ("get-env", "get-tiny-image", "nowhere.tool"):
            self.assertIn(name, denied)
            self.assertEqual(denied[name]["via"], "mcp")
            self.assertEqual(denied[name]["toolset"], "dev")
        self.assertEqual(denied["get-env"]["server"], "everything")
        self.assertIn("rule", denied["get-env"])
        # an allowed call: intent before, outcome after
        status, body = self.rpc(self.bob, "tools/call", {
            "name": "everything.echo", "arguments": {"message": "m"}},
            session=sid)
        rows = self.audit_rows()
        intent = [r for r in rows if r["kind"] == "tool_call" and
                  r["detail"].get("tool") == "echo" and
                  r["user"] == "bob"][-1]
        self.assertEqual(intent["detail"]["decision"], "allow")
        self.assertEqual(intent["detail"]["arguments"], {"message": "m"})
        outcome = [r for r in rows if r["kind"] == "tool_result" and
                   r["detail"]["intent"] == intent["id"]]
        self.assertEqual(outcome[0]["detail"]["outcome"], "ok")

    def test_confirm_rules_and_rate_limits(self):
        sid, _ = self.initialize(self.carol)
        self.assertIn("everything.get-tiny-image", self.tools(self.carol, sid))
        status, body = self.rpc(self.carol, "tools/call", {
            "name": "everything.get-tiny-image", "arguments": {}},
            session=sid)
        self.assertTrue(body["result"]["isError"])
        self.assertIn("cannot be given over MCP",
                      body["result"]["content"][0]["text"])
        row = [r for r in self.audit_rows() if r["user"] == "carol" and
               r["kind"] == "tool_call"][-1]
        self.assertEqual(row["detail"]["decision"], "confirm")
        texts = []
        for _ in range(3):
            status, body = self.rpc(self.carol, "tools/call", {
                "name": "everything.get-sum", "arguments": {"a": 1, "b": 1}},
                session=sid)
            texts.append((body["result"].get("isError", False),
                          body["result"]["content"][0]["text"]))
        self.assertEqual([e for e, _ in texts], [False, False, True])
        self.assertIn("rate limit", texts[2][1])

    def test_progress(self):
        sid, _ = self.initialize(self.bob)
        status, h, events = self.post(self.bob, {
            "jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "everything.trigger-long-running-operation",
                       "arguments": {"duration": 1, "steps": 3},
                       "_meta": {"progressToken": "p-9"}}},
            session=sid, version=LEGACY)
        progress = [m["params"] for _, m in events
                    if m.get("method") == "notifications/progress"]
        self.assertEqual([p["progress"] for p in progress], [1, 2, 3])
        self.assertTrue(all(p["progressToken"] == "p-9" for p in progress))
        self.assertEqual(events[-1][1]["id"], 9)
        self.assertEqual(h["content-type"], "text/event-stream")
        for eid, _ in events:
            self.assertRegex(eid, r"^[1-9][0-9]*-[0-9]+$")
        # ids increase along the stream
        seqs = [int(e.split("-")[1]) for e, _ in events]
        self.assertEqual(seqs, sorted(seqs))

    def test_cancel_a_slow_call(self):
        sid, _ = self.initialize(self.bob)
        body = json.dumps({
            "jsonrpc": "2.0", "id": 11, "method": "tools/call",
            "params": {"name": "everything.trigger-long-running-operation",
                       "arguments": {"duration": 30, "steps": 30},
                       "_meta": {"progressToken": 11}}})
        s = self.open("POST", self.bob, body=body, session=sid,
                      version=LEGACY)
        eid, msg = s.next_event()
        self.assertEqual(msg["method"], "notifications/progress")
        status, _, _ = self.post(self.bob, {
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 11, "reason": "test"}},
            session=sid, version=LEGACY)
        self.assertEqual(status, 202)
        t0 = time.monotonic()
        rest = []
        while True:
            ev = s.next_event()
            if ev is None:
                break
            rest.append(ev[1])
        s.close()
        self.assertLess(time.monotonic() - t0, 10)
        self.assertFalse([m for m in rest if m.get("id") == 11],
                         "a cancelled request gets no answer")
        rows = self.audit_rows()
        intent = [r for r in rows if r["kind"] == "tool_call" and
                  r["detail"].get("tool") ==
                  "trigger-long-running-operation"][-1]
        outcome = wait_for(lambda: [r for r in self.audit_rows()
                                    if r["kind"] == "tool_result" and
                                    r["detail"]["intent"] == intent["id"]],
                           what="the outcome row")
        self.assertEqual(outcome[0]["detail"]["outcome"], "cancelled")

    def test_get_stream_and_resumption(self):
        sid, _ = self.initialize(self.bob)
        g = self.open("GET", self.bob, session=sid, version=LEGACY)
        self.assertEqual(g.status, 200)
        self.assertEqual(g.headers["content-type"], "text/event-stream")
        # a reload may change every list: the stream says so
        self.b.ctl("reload")
        eid, msg = g.next_event()
        self.assertEqual(msg["method"], "notifications/tools/list_changed")
        self.assertEqual(eid, "0-1")
        g.close()
        # missed while away, replayed after Last-Event-ID
        self.b.ctl("reload")
        time.sleep(0.5)
        g = self.open("GET", self.bob, session=sid, version=LEGACY,
                      extra={"Last-Event-ID": eid})
        eid2, msg = g.next_event()
        self.assertEqual(eid2, "0-2")
        self.assertEqual(msg["method"], "notifications/tools/list_changed")
        g.close()
        # a POST's stream, broken off, taken up again with GET
        body = json.dumps({
            "jsonrpc": "2.0", "id": 21, "method": "tools/call",
            "params": {"name": "everything.trigger-long-running-operation",
                       "arguments": {"duration": 2, "steps": 4},
                       "_meta": {"progressToken": 21}}})
        s = self.open("POST", self.bob, body=body, session=sid,
                      version=LEGACY)
        first, msg = s.next_event()
        self.assertEqual(msg["params"]["progress"], 1)
        s.close()
        g = self.open("GET", self.bob, session=sid, version=LEGACY,
                      extra={"Last-Event-ID": first})
        rest = []
        while True:
            ev = g.next_event()
            if ev is None:
                break
            rest.append(ev)
        g.close()
        self.assertEqual([m["params"]["progress"] for _, m in rest
                          if "params" in m], [2, 3, 4])
        self.assertEqual(rest[-1][1]["id"], 21)
        self.assertTrue(all(e.split("-")[0] == first.split("-")[0]
                            for e, _ in rest))
        # a GET needs the event stream type and a session
        status, _, _ = self.b.request("GET", "/mcp/dev", None,
                                      self.headers(self.bob, session=sid,
                                                   sse=False))
        self.assertEqual(status, 406)
        status, _, _ = self.b.request("GET", "/mcp/dev", None,
                                      self.headers(self.bob))
        self.assertEqual(status, 405)

    def test_an_http10_stream_ends_and_the_broker_stays(self):
        """An HTTP/1.0 client gets no chunked coding: the end of its stream
        closes the connection at once, inside the call that ends it."""
        sid, _ = self.initialize(self.bob)
        before = self.b.processes()["frontend"]["pid"]
        s = socket.create_connection(("127.0.0.1", self.b.port), timeout=30)
        head = "".join("%s: %s\r\n" % kv for kv in self.headers(
            self.bob, session=sid, version=LEGACY).items())
        s.sendall(("GET /mcp/dev HTTP/1.0\r\n%s\r\n" % head).encode())
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(4096)
        self.assertTrue(got.startswith(b"HTTP/1.0 200") or
                        got.startswith(b"HTTP/1.1 200"), got)
        # the idle stream's output is all written: ending the session ends it
        status, _, _ = self.b.request("DELETE", "/mcp/dev", None,
                                      self.headers(self.bob, session=sid))
        self.assertEqual(status, 200)
        while s.recv(4096):
            pass
        s.close()
        self.assertEqual(self.b.get("/readyz")[0], 200)
        self.assertEqual(self.b.processes()["frontend"]["pid"], before)

    def test_a_servers_tool_change_reaches_the_get_stream(self):
        """A 2026-07-28 server (SDK v2) adds a tool: sessions hear of it."""
        sid, _ = self.initialize(self.bob, toolset="v2")
        before = self.tools(self.bob, sid, "v2")
        self.assertIn("v2.change_tools", before)
        self.assertIn("v2.t29", before)     # its own pages walked
        g = self.open("GET", self.bob, toolset="v2", session=sid,
                      version=LEGACY)
        status, body = self.rpc(self.bob, "tools/call", {
            "name": "v2.change_tools", "arguments": {}}, session=sid,
            toolset="v2")
        added = body["result"]["content"][0]["text"].split()[-1]
        eid, msg = g.next_event()
        g.close()
        self.assertEqual(msg["method"], "notifications/tools/list_changed")
        self.assertIn("v2." + added, self.tools(self.bob, sid, "v2"))

    def test_second_user_cannot_use_the_session(self):
        sid, _ = self.initialize(self.alice)
        for method in ("POST", "GET", "DELETE"):
            if method == "POST":
                status, body = self.rpc(self.bob, "tools/list", {},
                                        session=sid)
                self.assertEqual(body["error"]["code"], -32001)
            else:
                status, _, _ = self.b.request(
                    method, "/mcp/dev", None,
                    self.headers(self.bob, session=sid, version=LEGACY))
            self.assertEqual(status, 404, method)
        rows = [r for r in self.audit_rows() if r["kind"] == "auth" and
                r["user"] == "bob"]
        self.assertTrue(any(r["detail"].get("reason") ==
                            "MCP session of another user" for r in rows))
        # still alice's
        self.assertIn("everything.echo", self.tools(self.alice, sid))

    def test_origin(self):
        status, body = self.rpc(self.bob, "ping",
                                extra={"Origin": "http://evil.example"})
        self.assertEqual(status, 403)
        # DNS rebinding: the attacker's name as Host and as Origin
        status, body = self.rpc(self.bob, "ping", extra={
            "Host": "evil.example", "Origin": "http://evil.example"})
        self.assertEqual(status, 403)
        # a page of our own on a loopback name may
        host = "127.0.0.1:%d" % self.b.port
        status, h, body = self.post(self.bob, {
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}},
            extra={"Origin": "http://" + host, "Host": host})
        self.assertEqual(status, 200)

    def test_unauthenticated_gets_resource_metadata(self):
        status, h, data = self.b.request(
            "POST", "/mcp/dev", json.dumps({"jsonrpc": "2.0", "id": 1,
                                            "method": "ping"}),
            self.headers(None))
        self.assertEqual(status, 401)
        url = "http://127.0.0.1:%d/.well-known/oauth-protected-resource/" \
              "mcp/dev" % self.b.port
        self.assertEqual(h["WWW-Authenticate"],
                         'Bearer resource_metadata="%s"' % url)
        status, doc = self.b.get("/.well-known/oauth-protected-resource/"
                                 "mcp/dev")
        self.assertEqual(status, 200)
        self.assertEqual(doc["resource"],
                         "http://127.0.0.1:%d/mcp/dev" % self.b.port)
        self.assertEqual(doc["bearer_methods_supported"], ["header"])
        status, _ = self.b.get("/.well-known/oauth-protected-resource/"
                               "mcp/nope")
        self.assertEqual(status, 404)
        status, _, _ = self.b.request("POST", "/mcp/dev", "{}",
                                      self.headers("mcpb_" + "A" * 43))
        self.assertEqual(status, 401)

    def test_bad_requests(self):
        status, _, body = self.post(self.bob, "[{}]")
        self.assertEqual((status, body["error"]["code"]), (400, -32600))
        status, _, body = self.post(self.bob, "{nope")
        self.assertEqual((status, body["error"]["code"]), (400, -32700))
        # The API's strict rules hold here too: UTF-8 and numbers.
        for raw, why in ((b'{"jsonrpc":"2.0","id":1,"method":"ping",'
                          b'"params":{"x":"\xc0\xaf"}}', "invalid UTF-8"),
                         (b'{"jsonrpc":"2.0","id":1,"method":"ping",'
                          b'"params":{"x":NaN}}', "not finite")):
            status, _, body = self.post(self.bob, raw)
            self.assertEqual((status, body["error"]["code"]), (400, -32700))
            self.assertIn(why, body["error"]["message"])
        status, _, body = self.post(self.bob, {"id": 1, "method": "ping"})
        self.assertEqual((status, body["error"]["code"]), (400, -32600))
        status, _, body = self.post(self.bob, {"jsonrpc": "2.0", "id": 1,
                                               "method": "ping"},
                                    extra={"Mcp-Session-Id": "a b"})
        self.assertEqual(status, 400)

    # -- 2026-07-28 ------------------------------------------------------
    def test_modern_stateless_requests(self):
        status, h, body = self.modern(self.bob, "server/discover")
        self.assertEqual(status, 200, body)
        self.assertNotIn("mcp-session-id", h)
        r = body["result"]
        self.assertIn(MODERN, r["supportedVersions"])
        self.assertEqual(r["resultType"], "complete")
        self.assertEqual(r["_meta"]["io.modelcontextprotocol/serverInfo"]
                         ["name"], "mcpbroker/dev")
        self.assertGreaterEqual(r["ttlMs"], 0)
        status, h, body = self.modern(self.bob, "tools/list")
        r = body["result"]
        self.assertEqual(sorted(t["name"] for t in r["tools"]),
                         sorted(TOOLS_OF_DEV))
        self.assertEqual(r["cacheScope"], "private")
        self.assertGreater(r["ttlMs"], 0)
        status, h, events = self.modern(self.bob, "tools/call", {
            "name": "everything.echo", "arguments": {"message": "now"}})
        self.assertEqual(status, 200)
        msg = events[-1][1] if isinstance(events, list) else events
        self.assertEqual(msg["result"]["content"][0]["text"], "Echo: now")
        self.assertEqual(msg["result"]["resultType"], "complete")

    def test_modern_headers_must_match_the_body(self):
        status, h, body = self.modern(self.bob, "tools/list",
                                      headers={"Mcp-Method": "tools/call"})
        self.assertEqual((status, body["error"]["code"]), (400, -32020))
        status, h, body = self.modern(self.bob, "tools/list",
                                      headers={"Mcp-Method": None})
        self.assertEqual((status, body["error"]["code"]), (400, -32020))
        status, h, body = self.modern(self.bob, "tools/call", {
            "name": "everything.echo", "arguments": {"message": "x"}},
            headers={"Mcp-Name": "everything.get-sum"})
        self.assertEqual((status, body["error"]["code"]), (400, -32020))
        status, h, body = self.modern(self.bob, "tools/call", {
            "name": "everything.echo", "arguments": {"message": "x"}},
            headers={"Mcp-Name": None})
        self.assertEqual((status, body["error"]["code"]), (400, -32020))
        # Base64-encoded Mcp-Name is decoded before the comparison
        status, h, body = self.modern(self.bob, "tools/call", {
            "name": "everything.echo", "arguments": {"message": "x"}},
            headers={"Mcp-Name": "=?base64?ZXZlcnl0aGluZy5lY2hv?="},
            rid=3)
        self.assertEqual(status, 200)
        # the version header must equal _meta's
        status, h, body = self.modern(self.bob, "ping",
                                      header_version="2025-11-25")
        self.assertEqual((status, body["error"]["code"]), (400, -32020))
        status, h, body = self.modern(self.bob, "ping",
                                      meta_version="2099-01-01",
                                      header_version="2099-01-01")
        self.assertEqual((status, body["error"]["code"]), (400, -32022))
        self.assertIn(MODERN, body["error"]["data"]["supported"])
        status, h, body = self.modern(self.bob, "no/such")
        self.assertEqual((status, body["error"]["code"]), (404, -32601))
        status, h, body = self.modern(self.bob, "initialize")
        self.assertEqual(status, 404)

    def test_modern_listen(self):
        params = {"notifications": {"toolsListChanged": True}}
        params["_meta"] = {"io.modelcontextprotocol/protocolVersion": MODERN}
        body = json.dumps({"jsonrpc": "2.0", "id": 42,
                           "method": "subscriptions/listen",
                           "params": params})
        s = self.open("POST", self.bob, body=body, version=MODERN,
                      extra={"Mcp-Method": "subscriptions/listen"})
        self.assertEqual(s.status, 200)
        _, ack = s.next_event()
        self.assertEqual(ack["method"],
                         "notifications/subscriptions/acknowledged")
        self.assertEqual(ack["params"]["_meta"]
                         ["io.modelcontextprotocol/subscriptionId"], 42)
        self.assertEqual(ack["params"]["notifications"],
                         {"toolsListChanged": True})
        self.b.ctl("reload")
        _, msg = s.next_event()
        self.assertEqual(msg["method"], "notifications/tools/list_changed")
        self.assertEqual(msg["params"]["_meta"]
                         ["io.modelcontextprotocol/subscriptionId"], 42)
        s.close()

    def listen(self, key, rid=42):
        params = {"notifications": {"toolsListChanged": True},
                  "_meta": {"io.modelcontextprotocol/protocolVersion":
                            MODERN}}
        body = json.dumps({"jsonrpc": "2.0", "id": rid,
                           "method": "subscriptions/listen",
                           "params": params})
        return self.open("POST", key, body=body, version=MODERN,
                         extra={"Mcp-Method": "subscriptions/listen"})

    def test_listen_streams_per_user(self):
        """Streams stay open: a user gets 32, and others still get theirs."""
        streams = []
        self.addCleanup(lambda: [s.close() for s in streams])
        for i in range(32):
            streams.append(self.listen(self.carol, rid=i))
            self.assertEqual(streams[-1].status, 200)
            self.assertEqual(streams[-1].next_event()[1]["method"],
                             "notifications/subscriptions/acknowledged")
        s = self.listen(self.carol, rid=99)
        body = json.loads(s.r.read())
        s.close()
        self.assertEqual(body["error"]["code"], -32600, body)
        self.assertIn("too many open subscriptions/listen streams (32)",
                      body["error"]["message"])
        other = self.listen(self.bob)
        streams.append(other)
        self.assertEqual(other.next_event()[1]["method"],
                         "notifications/subscriptions/acknowledged")
        # a stream the client closed makes room again
        streams.pop(0).close()

        def room():
            s = self.listen(self.carol, rid=100)
            streams.append(s)
            return s.headers["content-type"] == "text/event-stream"
        wait_for(room, timeout=10, what="room for another stream")

    # -- resources and prompts -------------------------------------------
    def test_resources_and_prompts_under_policy(self):
        sid, _ = self.initialize(self.bob)
        status, body = self.rpc(self.bob, "resources/list", {}, session=sid)
        uris = []
        r = body["result"]
        while True:
            uris += [x["uri"] for x in r["resources"]]
            if "nextCursor" not in r:
                break
            _, body = self.rpc(self.bob, "resources/list",
                               {"cursor": r["nextCursor"]}, session=sid)
            r = body["result"]
        self.assertTrue(uris)
        prefix = "mcpbroker://everything/demo://resource/static/document/"
        self.assertTrue(all(u.startswith(prefix) for u in uris), uris)
        status, body = self.rpc(self.bob, "resources/read",
                                {"uri": uris[0]}, session=sid)
        contents = body["result"]["contents"]
        self.assertEqual(contents[0]["uri"], uris[0])
        self.assertTrue(contents[0]["text"])
        status, body = self.rpc(self.bob, "resources/read", {
            "uri": "mcpbroker://everything/demo://resource/dynamic/text/1"},
            session=sid)
        self.assertEqual(body["error"]["code"], -32002)
        self.assertIn("refused by policy", body["error"]["message"])
        # a glob over the URI is not a way out of its tree
        for tail in ("../../dynamic/text/1", "..%2F..%2Fdynamic/text/1",
                     "%2e%2e/%2E%2E/dynamic/text/1", "./1", ".."):
            status, body = self.rpc(self.bob, "resources/read", {
                "uri": prefix + tail}, session=sid)
            self.assertEqual(body["error"]["code"], -32002, tail)
            self.assertIn("dot segment", body["error"]["message"], tail)
        status, body = self.rpc(self.bob, "prompts/list", {}, session=sid)
        self.assertEqual([p["name"] for p in body["result"]["prompts"]],
                         ["everything.simple-prompt"])
        status, body = self.rpc(self.bob, "prompts/get", {
            "name": "everything.simple-prompt"}, session=sid)
        self.assertEqual(body["result"]["messages"][0]["role"], "user")
        status, body = self.rpc(self.bob, "prompts/get", {
            "name": "everything.args-prompt", "arguments": {"city": "X"}},
            session=sid)
        self.assertIn("error", body)
        # the admin sees and reads the dynamic ones too
        sid_a, _ = self.initialize(self.alice)
        status, body = self.rpc(self.alice, "resources/templates/list", {},
                                session=sid_a)
        templates = [t["uriTemplate"] for t in
                     body["result"]["resourceTemplates"]]
        self.assertIn("mcpbroker://everything/demo://resource/dynamic/text/"
                      "{resourceId}", templates)
        status, body = self.rpc(self.alice, "resources/read", {
            "uri": "mcpbroker://everything/demo://resource/dynamic/text/1"},
            session=sid_a)
        self.assertIn("contents", body["result"])
        status, body = self.rpc(self.alice, "prompts/get", {
            "name": "everything.args-prompt", "arguments": {"city": "X"}},
            session=sid_a)
        self.assertIn("X", json.dumps(body["result"]))
        rows = [r for r in self.audit_rows() if r["kind"] in
                ("resource_read", "prompt_get")]
        self.assertTrue(any(r["user"] == "bob" and
                            r["detail"]["decision"] == "deny" for r in rows))
        self.assertTrue(any(r["user"] == "alice" and
                            r["detail"]["decision"] == "allow" for r in rows))
        # modern: the same, stateless
        status, h, body = self.modern(self.bob, "resources/read",
                                      {"uri": uris[0]})
        self.assertEqual(body["result"]["contents"][0]["uri"], uris[0])
        self.assertEqual(body["result"]["cacheScope"], "private")

    # -- real clients ----------------------------------------------------
    def node_client(self, *args, cwd=None):
        r = subprocess.run([node()] + list(args), capture_output=True,
                           text=True, timeout=120, cwd=cwd)
        return r

    def test_inspector_cli(self):
        cli = os.path.join(TESTS, "node_modules", "@modelcontextprotocol",
                           "inspector-cli", "build", "index.js")
        url = "http://127.0.0.1:%d/mcp/dev" % self.b.port
        auth = "Authorization: Bearer " + self.bob
        # it finds its own package.json from a directory whose parent has
        # one: tests/integration
        here = os.path.dirname(os.path.abspath(__file__))
        r = self.node_client(cli, url, "--transport", "http", "--header",
                             auth, "--method", "tools/list", cwd=here)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        names = [t["name"] for t in json.loads(r.stdout)["tools"]]
        self.assertEqual(sorted(names), sorted(TOOLS_OF_DEV))
        r = self.node_client(cli, url, "--transport", "http", "--header",
                             auth, "--method", "tools/call", "--tool-name",
                             "everything.echo", "--tool-arg",
                             "message=inspected", cwd=here)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        self.assertEqual(json.loads(r.stdout)["content"][0]["text"],
                         "Echo: inspected")

    def test_sdk_v2_client(self):
        client = os.path.join(FIXTURES, "mcp_v2_client.mjs")
        url = "http://127.0.0.1:%d/mcp/dev" % self.b.port
        for mode, version in (("modern", MODERN), ("legacy", "2025-11-25")):
            r = self.node_client(client, url, "--token", self.bob, "--mode",
                                 mode, "--call", "everything.echo", "--args",
                                 '{"message": "v2"}')
            self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
            out = json.loads(r.stdout)
            self.assertEqual(out["protocolVersion"], version)
            self.assertEqual(out["serverInfo"]["name"], "mcpbroker/dev")
            self.assertEqual(sorted(out["tools"]), sorted(TOOLS_OF_DEV))
            self.assertEqual(out["result"]["content"][0]["text"], "Echo: v2")
        r = self.node_client(client, url, "--token", self.bob, "--call",
                             "everything.trigger-long-running-operation",
                             "--args", '{"duration": 1, "steps": 2}',
                             "--progress")
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        self.assertEqual([p["progress"] for p in
                          json.loads(r.stdout)["progress"]], [1, 2])
        r = self.node_client(client, url, "--token", self.alice, "--call",
                             "everything.get-env")
        self.assertTrue(json.loads(r.stdout)["result"]["isError"])


class PerUserSubscriptionTest(unittest.TestCase):
    """Resource subscriptions on a per-user server: each user's instance
    is told of each user's subscription, and each hears its own updates."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mcpbroker-subs-")
        os.chmod(self.dir, 0o755)
        self.addCleanup(shutil.rmtree, self.dir, True)
        tools = os.path.join(self.dir, "tools.json")
        self.note = os.path.join(self.dir, "note.txt")
        for path, text in ((tools, '{"tools": []}'), (self.note, "v1")):
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o644)
        self.b = Broker('auth { api-keys }\n'
                        'server "m" { command "python3" "%s" "%s" "%s" '
                        'isolation per-user }\n'
                        'toolset "t" { tools "m.*" }\n'
                        'allow role "dev" resource "m.*"\n'
                        % (os.path.join(FIXTURES, "mutable_mcp_server.py"),
                           tools, self.note))
        self.addCleanup(self.b.stop)
        self.b.start()

    def listen(self, key, uri):
        conn = http.client.HTTPConnection("127.0.0.1", self.b.port,
                                          timeout=20)
        conn.request("POST", "/mcp/t", body=self.body(
            7, "subscriptions/listen",
            {"notifications": {"resourceSubscriptions": [uri]}}),
            headers=self.headers(key, "subscriptions/listen"))
        s = Stream(conn, conn.getresponse())
        self.addCleanup(s.close)
        _, ack = s.next_event()
        self.assertEqual(ack["params"]["notifications"].get(
            "resourceSubscriptions"), [uri], ack)
        return s

    def body(self, rid, method, params):
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "t",
                                                   "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}
        return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                           "params": params})

    def headers(self, key, method, name=None):
        h = {"Authorization": "Bearer " + key,
             "Content-Type": "application/json",
             "Accept": "application/json, text/event-stream",
             "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if name is not None:
            h["Mcp-Name"] = name
        return h

    def read(self, key, uri):
        """resources/read on the user's instance: it has taken every
        request sent to it before (one pipe, answered in order)."""
        status, _, data = self.b.request(
            "POST", "/mcp/t", self.body(8, "resources/read", {"uri": uri}),
            self.headers(key, "resources/read", uri), timeout=20)
        self.assertEqual(status, 200, data)
        return json.loads(data)["result"]["contents"][0]["text"]

    def test_every_users_instance_is_subscribed(self):
        uri = "mcpbroker://m/note://n"
        keys = [self.b.ctl("user", "add", "-r", "dev", u).stdout.split()[-1]
                for u in ("bob", "carol")]
        streams = [self.listen(k, uri) for k in keys]
        # each instance has taken its subscription before the change
        self.assertEqual([self.read(k, uri) for k in keys], ["v1", "v1"])
        with open(self.note, "w") as f:
            f.write("v2")
        for s in streams:
            _, msg = s.next_event()
            self.assertEqual(msg["method"], "notifications/resources/updated")
            self.assertEqual(msg["params"]["uri"], uri)


class NameCollisionTest(unittest.TestCase):
    """Two servers that could offer one name in a toolset: -n says so."""

    def check(self, body):
        b = Broker(body)
        try:
            return subprocess.run([MCPBROKER, "-n", "-f", b.conf],
                                  capture_output=True, text=True, timeout=30)
        finally:
            b.stop()

    def test_bare_names_of_two_servers(self):
        r = self.check('server "a" { command "true" }\n'
                       'server "b" { command "true" }\n'
                       'toolset "t" {\n tools "a.*" "b.*"\n names bare\n}\n')
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r'mcpbroker\.conf:\d+: toolset "t": '
                         r'servers "a" and "b" may offer tools of the same '
                         r'name with names bare')

    def test_underscore_prefixes_that_overlap(self):
        r = self.check('server "a" { command "true" }\n'
                       'server "a__b" { command "true" }\n'
                       'toolset "t" { tools "*" names underscore }\n')
        self.assertEqual(r.returncode, 1)
        self.assertIn('servers "a" and "a__b"', r.stderr)
        r = self.check('server "a" { command "true" }\n'
                       'server "a__b" { command "true" }\n'
                       'toolset "t" { tools "*" }\n')
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
