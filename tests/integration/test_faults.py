"""Fault injection: what a user sees when a part fails, and that nothing
else is affected and nothing is lost.

Each fault is one row of the "Faults" table in docs/SECURITY.md.  After
each: another user's chat works, `mcpbrokerctl audit verify` passes, and
every tool call that was allowed to run has an outcome row.  Python MCP
servers only (tests/fixtures/hostile_mcp_server.py), no Node.
"""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
import unittest

from broker import Broker, pid_alive, wait_for
from llmfixtures import KEY, PROVIDERS, FakeLLM, sse_events
from mcpfixtures import HOSTILE

USERS = ("alice", "bob")


def q(path):
    return '"%s"' % path


def server_block(name, mode, log=None, extra=""):
    env = ' env "HOSTILE_LOG"' if log else ""
    return ('server "%s" { command "python3" %s "%s"%s %s }\n'
            % (name, q(HOSTILE), mode, env, extra))


def shared_log():
    """A HOSTILE_LOG file the server instances (nobody) can write."""
    fd, path = tempfile.mkstemp(prefix="mcpbroker-faults-", suffix=".log")
    os.close(fd)
    os.chmod(path, 0o666)
    return path


def read(path):
    with open(path) as f:
        return f.read()


class FaultBase(unittest.TestCase):
    """A daemon with two users; `llm` is the faulty provider, `calm` the
    bystander's, each its own fake so that their scripts do not mix."""

    servers = ""
    limits = "limits { tool-timeout 2s llm-timeout 2s }"

    def start_broker(self, body, users=USERS, wrap=None):
        self.b = Broker(body)
        self.addCleanup(self.b.stop)
        if wrap is not None:
            self.b.wrap = wrap(self.b)
        self.b.start()
        self.keys = {u: self.b.ctl("user", "add", u).stdout.split()[-1]
                     for u in users}
        return self.b

    def setUp(self):
        self.llm = FakeLLM()
        self.addCleanup(self.llm.stop)
        self.calm = FakeLLM()
        self.addCleanup(self.calm.stop)
        os.environ["FAKE_LLM_KEY"] = KEY
        self.hlog = shared_log()
        self.addCleanup(os.unlink, self.hlog)
        os.environ["HOSTILE_LOG"] = self.hlog
        self.start_broker(self.config())

    def config(self):
        return ('auth { api-keys }\n'
                'provider "llm" { %s }\nprovider "calm" { %s }\n%s%s\n'
                'allow tool "*"\n'
                % (PROVIDERS["openai"] % self.llm.port,
                   PROVIDERS["openai"] % self.calm.port, self.servers,
                   self.limits))

    def headers(self, user):
        return {"Authorization": "Bearer " + self.keys[user],
                "Content-Type": "application/json"}

    def post(self, user, path, body, timeout=30):
        status, _, data = self.b.request("POST", path, json.dumps(body),
                                         self.headers(user), timeout=timeout)
        return status, json.loads(data) if data else None

    def connect(self, user, provider):
        status, doc = self.post(user, "/llmchat/connect",
                                {"provider": provider})
        self.assertEqual(status, 200, doc)

    def stream(self, user, message, seen=None):
        """SSE chat: (status, [(event, data)]); seen, a list, gets each
        event as it arrives."""
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.b.port,
                                          timeout=60)
        conn.request("POST", "/llmchat/chat",
                     json.dumps({"message": message}), self.headers(user))
        r = conn.getresponse()
        if r.getheader("Content-Type", "").startswith("application/json"):
            return r.status, json.loads(r.read())
        events, event, data = [], None, []
        for line in r:
            line = line.decode().rstrip("\r\n")
            if line == "":
                if event is not None:
                    events.append((event, json.loads("\n".join(data))))
                    if seen is not None:
                        seen.append(events[-1])
                event, data = None, []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        conn.close()
        return r.status, events

    def bystander_chats(self, user="bob"):
        """Another user's whole chat on the calm provider: it works."""
        self.calm.script({"text": "all quiet"})
        status, doc = self.post(user, "/llmchat/chat",
                                {"message": "anything wrong?",
                                 "streaming": False})
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["content"], "all quiet")

    def audit_rows(self):
        out = self.b.ctl("audit", "export", "--format", "jsonl").stdout
        return [json.loads(line) for line in out.splitlines() if line]

    def assert_nothing_lost(self):
        """The chain verifies, and every call that ran has its outcome."""
        r = self.b.ctl("audit", "verify", check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        rows = self.audit_rows()
        ran = {r["id"] for r in rows if r["kind"] == "tool_call"
               and r["detail"].get("decision") == "allow"}
        ended = {r["detail"]["intent"] for r in rows
                 if r["kind"] == "tool_result"}
        self.assertEqual(ran - ended, set(), "intents without an outcome")
        return rows

    def history(self, user):
        status, _, data = self.b.request("GET", "/llmchat/history",
                                         headers=self.headers(user))
        self.assertEqual(status, 200, data)
        return json.loads(data)["messages"]

    def mcp_call(self, toolset, tool, arguments, rid=1, user="alice"):
        """A stateless (2026-07-28) tools/call on /mcp/TOOLSET: (status,
        headers, body)."""
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "t",
                                                       "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}}
        body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments,
                           "_meta": meta}}
        headers = dict(self.headers(user))
        headers.update({"Accept": "application/json, text/event-stream",
                        "MCP-Protocol-Version": "2026-07-28",
                        "Mcp-Method": "tools/call", "Mcp-Name": tool})
        return self.b.request("POST", "/mcp/" + toolset, json.dumps(body),
                              headers, timeout=60)


class LLMFaultTest(FaultBase):
    """The provider's connection reset mid-stream; a provider that stops
    answering in the middle of a stream."""

    def setUp(self):
        super().setUp()
        self.connect("alice", "llm")
        self.connect("bob", "calm")

    def during(self, fault, message):
        """alice's chat meets the fault while bob chats; both results."""
        self.llm.script(fault, {"text": "recovered"})
        got = {}
        t = threading.Thread(target=lambda: got.update(
            alice=self.stream("alice", message)))
        t.start()
        time.sleep(0.3)
        self.bystander_chats()
        t.join(30)
        return got["alice"]

    def check_recovers(self):
        status, doc = self.post("alice", "/llmchat/chat",
                                {"message": "again", "streaming": False})
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["content"], "recovered")
        said = [m["content"] for m in self.history("alice")
                if m["role"] == "user"]
        self.assertEqual(said[-1], "again")
        self.assert_nothing_lost()

    def test_connection_reset_mid_stream(self):
        status, events = self.during({"text": "word " * 50,
                                      "reset_after_chunks": 5,
                                      "chunk_delay_ms": 60}, "talk")
        self.assertEqual(status, 200)
        kinds = [e for e, _ in events]
        self.assertIn("token", kinds)       # it broke mid-stream
        self.assertEqual(kinds[-1], "error")
        err = events[-1][1]
        self.assertIn(err["code"], ("provider_unreachable", "provider_error"))
        self.assertTrue(err["recoverable"])
        self.assertEqual(self.llm.requests()[0]["status"], "reset")
        self.check_recovers()

    def test_provider_silent_mid_stream(self):
        status, events = self.during({"text": "word " * 50,
                                      "hang_after_chunks": 3}, "talk")
        self.assertEqual(events[-1][0], "error")
        self.assertEqual(events[-1][1]["code"], "provider_timeout")
        self.assertIn("token", [e for e, _ in events])
        self.check_recovers()


class MCPFaultTest(FaultBase):
    """A server killed in the middle of a call; a server that never
    answers one."""

    servers = (server_block("slow", "slow-call", log=True) +
               server_block("crash", "exit-mid-call", log=True))

    def setUp(self):
        super().setUp()
        self.connect("alice", "llm")
        self.connect("bob", "calm")

    def instance_pids(self, mode):
        return [int(line.split("pid=")[1]) for line in
                read(self.hlog).splitlines()
                if "start mode=%s " % mode in line]

    def call_then_answer(self, tool, args, answer="done"):
        self.llm.script({"tool_calls": [{"name": tool, "arguments": args}]},
                        {"echo_tool_result": True})
        return self.stream("alice", "use " + tool)

    def tool_error(self, events):
        errs = [d for e, d in events if e == "tool_error"]
        self.assertEqual(len(errs), 1, events)
        self.assertEqual(events[-1][0], "final", events)
        return errs[0]["error"]

    def outcome_of(self, tool):
        rows = self.assert_nothing_lost()
        intent = [r for r in rows if r["kind"] == "tool_call"
                  and r["detail"].get("tool") == tool][-1]
        return [r["detail"] for r in rows if r["kind"] == "tool_result"
                and r["detail"]["intent"] == intent["id"]][0]

    def test_server_exits_mid_call(self):
        # test_mcp_worker covers `server call`; here it is a model's call.
        status, events = self.call_then_answer("crash__echo",
                                               {"text": "x"})
        self.assertIn('server "crash" exited with status 3',
                      self.tool_error(events))
        self.bystander_chats()
        self.assertEqual(self.outcome_of("echo")["outcome"], "error")
        wait_for(lambda: self.b.get("/readyz")[0] == 200, timeout=15,
                 what="the server back")

    def test_server_killed_mid_call(self):
        [pid] = self.instance_pids("slow-call")
        got = {}
        t = threading.Thread(target=lambda: got.update(r=self.call_then_answer(
            "slow__slow", {})))
        t.start()
        wait_for(lambda: "slow-call start" in read(self.hlog), timeout=10,
                 what="the call reaching the server")
        os.killpg(os.getpgid(pid), signal.SIGKILL)
        t.join(30)
        status, events = got["r"]
        self.assertRegex(self.tool_error(events),
                         r'server "slow" (exited|killed by signal 9)')
        self.bystander_chats()
        self.assertEqual(self.outcome_of("slow")["outcome"], "error")
        # The catalog instance comes back and serves the next call.
        wait_for(lambda: len(self.instance_pids("slow-call")) == 2,
                 timeout=15, what="a new instance")
        wait_for(lambda: self.b.get("/readyz")[0] == 200, timeout=15,
                 what="readiness")
        status, events = self.call_then_answer("slow__echo", {"text": "up"})
        self.assertEqual(events[-1][1]["content"], "up")

    def test_hung_server_times_out_and_is_not_wedged(self):
        status, events = self.call_then_answer("slow__slow", {})
        self.assertIn("timed out after 2000 ms", self.tool_error(events))
        # The turn went on: the model got the error and answered.
        self.assertIn("timed out", events[-1][1]["content"])
        self.assertEqual(self.outcome_of("slow")["outcome"], "error")
        # The server was told, and the same instance serves the next call.
        wait_for(lambda: "cancelled id=" in read(self.hlog), timeout=5,
                 what="notifications/cancelled")
        status, events = self.call_then_answer("slow__echo", {"text": "ok"})
        self.assertEqual(events[-1][1]["content"], "ok")
        self.assertEqual(len(self.instance_pids("slow-call")), 1)
        self.bystander_chats()


class ClosedOutputTest(FaultBase):
    """A server that closes its output and lives on: the worker waits a
    moment for its exit status, and a call that comes in that moment
    cannot be sent.  It fails at once, and the worker goes on."""

    servers = (server_block("gone", "close-stdout", log=True) +
               'toolset "t" { tools "gone.*" }\n')

    def setUp(self):
        super().setUp()
        self.connect("bob", "calm")

    def call(self, rid, text):
        status, _, data = self.mcp_call("t", "gone.echo", {"text": text},
                                        rid=rid)
        body = json.loads(data)
        self.assertEqual(status, 200, body)
        self.assertTrue(body["result"]["isError"], body)
        return body["result"]["content"][0]["text"]

    def test_a_call_after_the_output_closed(self):
        worker = self.b.processes()["worker gone"]["pid"]
        got = {}
        first = threading.Thread(target=lambda: got.update(
            first=self.call(1, "one")))
        first.start()
        wait_for(lambda: "closed stdout" in read(self.hlog), timeout=10,
                 what="the server closing its output")
        time.sleep(0.1)     # for the worker to read the end of it
        self.assertIn("the server is gone", self.call(2, "two"))
        first.join(30)
        self.assertIn("the server closed its output", got["first"])
        self.assertEqual(self.b.processes()["worker gone"]["pid"], worker)
        rows = self.assert_nothing_lost()
        self.assertEqual(len([r for r in rows if r["kind"] == "tool_result"
                              and r["detail"]["outcome"] == "error"]), 2)
        self.bystander_chats()


class NotJsonTest(FaultBase):
    """Servers whose output json-c reads but is not JSON: bytes that are
    not UTF-8 (the worker passes on what it can read, each bad byte as
    U+FFFD; it is not taken for a compromised worker and dropped), and NaN
    (the call fails; nobody downstream gets NaN to parse)."""

    servers = (server_block("odd", "bad-utf8", log=True) +
               server_block("nan", "nan-result", log=True) +
               'toolset "t" { tools "odd.*" "nan.*" }\n')

    def test_nan(self):
        status, _, data = self.mcp_call("t", "nan.echo", {"text": "hi"})
        self.assertEqual(status, 200, data)
        body = json.loads(data)
        self.assertTrue(body["result"]["isError"], body)
        self.assertIn("a number JSON does not have (NaN, Infinity)",
                      body["result"]["content"][0]["text"])
        status, _, data = self.mcp_call("t", "odd.echo", {"text": "ok"})
        self.assertEqual(status, 200, data)
        self.assertNotIn("protocol violation", self.b.log())
        self.assertEqual(self.assert_nothing_lost()[-1]["detail"]["outcome"],
                         "ok")

    def test_bytes_that_are_not_utf8(self):
        worker = self.b.processes()["worker odd"]["pid"]
        for rid in (1, 2):
            status, _, data = self.mcp_call("t", "odd.echo", {"text": "hi"},
                                            rid=rid)
            self.assertEqual(status, 200, data)
            self.assertEqual(json.loads(data)["result"]["content"][0]["text"],
                             "hi \ufffd\ufffd\ufffd\ufffd caf\ufffd")
        status, doc = self.post("alice", "/llmchat/connect",
                                {"provider": "llm"})
        self.assertEqual(status, 200, doc)
        self.assertIn("Echoes \ufffd\ufffd\ufffd\ufffd back",
                      [t["description"] for t in doc["tools"]])
        self.assertEqual(self.b.processes()["worker odd"]["pid"], worker)
        self.assertNotIn("protocol violation", self.b.log())
        self.assert_nothing_lost()


@unittest.skipUnless(os.geteuid() == 0, "mounting a tmpfs needs root")
class DiskFullBase(FaultBase):
    """The state directory on a 4 MiB tmpfs, in a mount namespace of the
    daemon's own, filled to the last byte."""

    servers = server_block("h", "ok", log=True)

    def setUp(self):
        self.llm = FakeLLM()
        self.addCleanup(self.llm.stop)
        self.calm = FakeLLM()
        self.addCleanup(self.calm.stop)
        os.environ["FAKE_LLM_KEY"] = KEY
        self.hlog = shared_log()
        self.addCleanup(os.unlink, self.hlog)
        os.environ["HOSTILE_LOG"] = self.hlog

        def wrap(b):
            state = os.path.join(b.dir, "state")
            os.makedirs(state, 0o750)
            return ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    'mount -t tmpfs -o size=4m,mode=0750 tmpfs "$0" && '
                    'exec "$@"', state]
        self.start_broker(self.config(), wrap=wrap)
        # The test sees the tmpfs through the daemon's root.
        self.state = "/proc/%d/root%s/state" % (self.b.proc.pid, self.b.dir)
        self.assertTrue(os.path.exists(os.path.join(self.state,
                                                    "mcpbroker.db")))
        self.connect("alice", "llm")
        self.connect("bob", "calm")

    def fill(self):
        """Fill the 4 MiB tmpfs; never more than 8 MiB anywhere else."""
        path = os.path.join(self.state, "filler")
        written = 0
        with open(path, "wb", buffering=0) as f:
            for size in (65536, 1):     # then the last bytes
                try:
                    while written < 8 << 20:
                        written += f.write(b"\0" * size)
                except OSError:
                    pass
        if written >= 8 << 20:
            os.unlink(path)
            self.fail("the state directory is not on the small tmpfs")
        return path


class DiskFullTest(DiskFullBase):
    def test_tool_call_refused_when_the_audit_cannot_be_written(self):
        filler = self.fill()
        self.llm.script({"tool_calls": [{"name": "h__echo",
                                         "arguments": {"text": "x"}}]},
                        {"echo_tool_result": True})
        status, events = self.stream("alice", "call it")
        self.assertEqual(status, 200)
        errs = [d["error"] for e, d in events if e == "tool_error"]
        self.assertEqual(len(errs), 1, events)
        self.assertIn("the audit trail cannot be written", errs[0])
        self.assertNotIn("tool_end", [e for e, _ in events])
        # The turn ends cleanly: an answer or an error event, no hang.
        self.assertIn(events[-1][0], ("final", "error"))
        # The server never saw the call.
        self.assertNotIn("tools/call", read(self.hlog))
        self.assertRegex(self.b.log(), r"database or disk is full")
        # Nothing crashed, and the bystander is served (not stored).
        procs = self.b.processes()
        self.assertTrue(all(p["restarts"] == 0 for p in procs.values()),
                        procs)
        self.bystander_chats()
        # Space again: everything works, and the chain verifies.
        os.unlink(filler)
        self.llm.script({"tool_calls": [{"name": "h__echo",
                                         "arguments": {"text": "back"}}]},
                        {"echo_tool_result": True})
        status, events = self.stream("alice", "call it again")
        self.assertEqual(events[-1][0], "final", events)
        self.assertEqual(events[-1][1]["content"], "back")
        self.assertIn("tools/call", read(self.hlog))
        rows = self.assert_nothing_lost()
        calls = [r for r in rows if r["kind"] == "tool_call"]
        self.assertEqual(len(calls), 1)     # the refused one left no row
        self.assertEqual(self.history("alice")[-1]["content"], "back")


class DiskFullApprovalTest(DiskFullBase):
    """An approval the trail cannot record runs nothing."""

    servers = server_block("h", "ok", log=True) + 'confirm tool "h.echo"\n'

    def test_an_approval_that_cannot_be_recorded(self):
        self.llm.script({"tool_calls": [{"name": "h__echo",
                                         "arguments": {"text": "x"}}]},
                        {"echo_tool_result": True})
        seen, got = [], {}
        t = threading.Thread(target=lambda: got.update(
            r=self.stream("alice", "call it", seen)))
        t.start()
        wait_for(lambda: any(e == "approval_required" for e, _ in seen),
                 timeout=15, what="the approval request")
        call = [d for e, d in seen if e == "approval_required"][0]["id"]
        filler = self.fill()
        status, doc = self.post("alice", "/llmchat/approve",
                                {"id": call, "approve": True})
        self.assertEqual((status, doc["error"]["code"]), (503, "audit"), doc)
        t.join(30)
        status, events = got["r"]
        errs = [d["error"] for e, d in events if e == "tool_error"]
        self.assertEqual(len(errs), 1, events)
        self.assertIn("its approval could not be recorded", errs[0])
        self.assertNotIn("tools/call", read(self.hlog))
        os.unlink(filler)
        self.assert_nothing_lost()


class ControllerKilledTest(FaultBase):
    """SIGKILL to the controller while many chats write."""

    servers = server_block("h", "slow-call", log=True)
    limits = "limits { tool-timeout 30s }"
    users = ["u%d" % i for i in range(8)]

    def setUp(self):
        self.llm = FakeLLM()
        self.addCleanup(self.llm.stop)
        self.calm = self.llm
        os.environ["FAKE_LLM_KEY"] = KEY
        os.environ["HOSTILE_SLOW_SECONDS"] = "1"
        self.addCleanup(os.environ.pop, "HOSTILE_SLOW_SECONDS")
        self.hlog = shared_log()
        self.addCleanup(os.unlink, self.hlog)
        os.environ["HOSTILE_LOG"] = self.hlog
        self.start_broker(self.config(), users=self.users)

    def chat_forever(self, user, stop, seen):
        while not stop.is_set():
            try:
                self.connect(user, "llm")
                self.stream(user, "work", seen)
            except Exception:
                return

    def test_database_and_trail_survive(self):
        step = {"tool_calls": [{"name": "h__echo", "arguments": {"text": "a"}},
                               {"name": "h__echo", "arguments": {"text": "b"}},
                               {"name": "h__slow", "arguments": {}}]}
        self.llm.script(*[step] * 2000)
        stop = threading.Event()
        seen = []
        threads = [threading.Thread(target=self.chat_forever,
                                    args=(u, stop, seen), daemon=True)
                   for u in self.users]
        for t in threads:
            t.start()

        def in_flight():
            log = read(self.hlog)
            return log.count("slow-call start") - \
                log.count("slow-call done") >= 4
        wait_for(in_flight, timeout=20, what="slow calls in flight")
        time.sleep(0.2)
        ctl = self.b.processes()["controller"]["pid"]
        os.kill(ctl, signal.SIGKILL)
        self.assertNotEqual(self.b.wait_exit(timeout=15), 0)   # fail closed
        stop.set()
        for t in threads:
            t.join(30)
        db = os.path.join(self.b.dir, "state", "mcpbroker.db")
        # The database as the crash left it (WAL and all) is consistent.
        copy = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, copy, True)
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db + suffix):
                shutil.copy(db + suffix, os.path.join(copy, "c.db" + suffix))
        con = sqlite3.connect(os.path.join(copy, "c.db"))
        self.assertEqual(con.execute("PRAGMA integrity_check").fetchall(),
                         [("ok",)])
        open_ = con.execute(
            "SELECT count(*) FROM audit c WHERE kind = 'tool_call' AND "
            "json_extract(detail, '$.decision') = 'allow' AND id NOT IN "
            "(SELECT json_extract(detail, '$.intent') FROM audit "
            "WHERE kind = 'tool_result')").fetchone()[0]
        # No one heard how a call ended before the trail held it.
        heard = sum(1 for e, _ in seen if e in ("tool_end", "tool_error"))
        ended = con.execute(
            "SELECT count(*) FROM audit WHERE kind = 'tool_result' AND "
            "json_extract(detail, '$.outcome') IN ('ok', 'error')"
            ).fetchone()[0]
        con.close()
        self.assertGreater(heard, 0)
        self.assertGreaterEqual(ended, heard)
        self.assertGreater(open_, 0, "no call was running at the kill")
        # Restarted: each call left running is closed as unknown, once.
        self.llm.reset()
        self.b.start()
        self.b.wait_log(r"audit: %d tool call\(s\) were running when the "
                        r"broker stopped" % open_)
        rows = self.assert_nothing_lost()
        unknown = [r for r in rows if r["kind"] == "tool_result"
                   and r["detail"]["outcome"] == "unknown"]
        self.assertEqual(len(unknown), open_)
        self.assertIn("broker stopped", unknown[0]["detail"]["reason"])
        self.b.signal(signal.SIGTERM)
        self.assertEqual(self.b.wait_exit(), 0)
        self.b.start()
        self.assertEqual(len(self.audit_rows()), len(rows))
        # The conversations are there, and a new chat works.
        self.connect("u0", "llm")
        status, doc = self.post("u0", "/llmchat/chat",
                                {"message": "hello", "streaming": False})
        self.assertEqual(status, 200, doc)
        status, _, data = self.b.request("GET", "/api/v1/conversations",
                                         headers=self.headers("u0"))
        self.assertEqual(status, 200, data)
        self.assertGreater(len(json.loads(data)["conversations"]), 1)


class BusyServerTest(FaultBase):
    """More calls at once than a server may have in flight (256): the rest
    wait for room, in order, and every call is answered; the server never
    holds more than 256."""

    CALLS = 300
    servers = (server_block("slow", "slow-call", log=True,
                            extra='env "HOSTILE_SLOW_SECONDS"') +
               'toolset "t" { tools "slow.*" }\n')
    limits = "limits { tool-timeout 60s }"

    def setUp(self):
        os.environ["HOSTILE_SLOW_SECONDS"] = "2"
        self.addCleanup(os.environ.pop, "HOSTILE_SLOW_SECONDS")
        super().setUp()

    def test_calls_beyond_the_servers_share_wait(self):
        answers = [None] * self.CALLS

        def run(i):
            answers[i] = self.mcp_call("t", "slow.slow", {}, rid=i)
        threads = [threading.Thread(target=run, args=(i,))
                   for i in range(self.CALLS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for status, _, data in answers:
            self.assertEqual(status, 200, data)
            self.assertIn(b"slept", data)
            self.assertNotIn(b'"isError":true', data)
        # Never more than 256 at once on the server.
        now = peak = 0
        for line in read(self.hlog).splitlines():
            if "slow-call start" in line:
                now += 1
                peak = max(peak, now)
            elif "slow-call done" in line:
                now -= 1
        self.assertEqual(peak, 256)
        self.assert_nothing_lost()


class TimedEvents(list):
    """Events as they arrive, each with the time it came (the wall clock,
    which the servers' logs use too)."""

    def append(self, event):
        super().append((time.time(), event))


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("strace"),
                     "needs root and strace")
class SlowDiskTest(FaultBase):
    """Every fsync of the controller takes DELAY (strace holds it): a call
    is answered only after two commits, its intent's before it runs and
    its outcome's after, so no one hears how a call ended before the
    trail holds it, over /mcp or in a chat."""

    DELAY = 0.5
    servers = (server_block("h", "ok", log=True) +
               'toolset "t" { tools "h.*" }\n')

    def slow_disk(self):
        pid = self.b.processes()["controller"]["pid"]
        tracer = subprocess.Popen(
            ["strace", "-qq", "-f", "-o", "/dev/null", "-p", str(pid),
             "-e", "trace=fdatasync,fsync",
             "-e", "inject=fdatasync,fsync:delay_enter=%d"
             % int(self.DELAY * 1e6)])
        self.addCleanup(tracer.wait)
        self.addCleanup(tracer.terminate)

        def traced():
            with open("/proc/%d/status" % pid) as f:
                return "TracerPid:\t0\n" not in f.read()
        wait_for(traced, what="strace attached")

    def test_answers_wait_for_the_outcome_on_disk(self):
        self.slow_disk()
        began = time.monotonic()
        status, _, data = self.mcp_call("t", "h.echo", {"text": "x"})
        took = time.monotonic() - began
        self.assertEqual(status, 200, data)
        self.assertIn(b'"x"', data)
        self.assertGreaterEqual(took, 2 * self.DELAY)
        # A chat: tool_end once the outcome is written, after the server
        # answered.
        self.llm.script({"tool_calls": [{"name": "h__echo",
                                         "arguments": {"text": "y"}}]},
                        {"echo_tool_result": True})
        self.connect("alice", "llm")
        seen = TimedEvents()
        status, events = self.stream("alice", "echo y", seen)
        self.assertEqual(events[-1][0], "final", events)
        at = {e: t for t, (e, _) in seen}
        served = [float(line.split()[0]) for line in
                  read(self.hlog).splitlines() if "recv tools/call" in line]
        self.assertEqual(len(served), 2, read(self.hlog))
        self.assertGreaterEqual(at["tool_end"] - served[-1], self.DELAY)
        self.assert_nothing_lost()


class ChatFsyncTest(FaultBase):
    """A chat turn's history goes to disk without a fsync of its own: the
    controller's fsyncs during a turn are the audit trail's commits (whose
    sync carries the messages written before them) and one per LLM call
    for its usage row.  A crash of the controller loses none of it."""

    servers = (server_block("h", "ok") + 'toolset "t" { tools "h.*" }\n')

    def fsyncs(self, turn):
        """The controller's fdatasync and fsync calls while turn runs."""
        pid = self.b.processes()["controller"]["pid"]
        out = os.path.join(self.b.dir, "strace.out")
        tracer = subprocess.Popen(
            ["strace", "-qq", "-f", "-o", out, "-p", str(pid),
             "-e", "trace=fdatasync,fsync"])

        def traced():
            with open("/proc/%d/status" % pid) as f:
                return "TracerPid:\t0\n" not in f.read()
        wait_for(traced, what="strace attached")
        turn()
        tracer.terminate()
        tracer.wait()
        return len([l for l in read(out).splitlines() if "sync(" in l])

    def test_history_is_not_synced_message_by_message(self):
        self.connect("alice", "llm")

        def plain():
            self.llm.script({"text": "no tools"})
            status, events = self.stream("alice", "hello")
            self.assertEqual(events[-1][0], "final", events)

        def with_a_tool():
            self.llm.script({"tool_calls": [{"name": "h__echo",
                                             "arguments": {"text": "y"}}]},
                            {"text": "done"})
            status, events = self.stream("alice", "echo y")
            self.assertEqual(events[-1][0], "final", events)
        # the usage row of the one LLM call (history: four before)
        self.assertEqual(self.fsyncs(plain), 1)
        # the intent and the outcome, two usage rows (before: eight)
        self.assertEqual(self.fsyncs(with_a_tool), 4)
        ctl = self.b.processes()["controller"]["pid"]
        os.kill(ctl, signal.SIGKILL)
        self.assertNotEqual(self.b.wait_exit(timeout=15), 0)
        con = sqlite3.connect(os.path.join(self.b.dir, "state",
                                           "mcpbroker.db"))
        self.addCleanup(con.close)
        rows = con.execute("SELECT role, content FROM messages ORDER BY "
                           "id").fetchall()
        self.assertEqual([r for r, _ in rows], ["user", "assistant", "user",
                                                "assistant", "tool",
                                                "assistant"])
        self.assertEqual([rows[i][1] for i in (0, 1, 2, 5)],
                         ["hello", "no tools", "echo y", "done"])


class CrashLoopTest(FaultBase):
    """A worker that keeps dying: degraded after 5 exits in 60 s, with a
    warning and one audit row, and ready again once it stays up."""

    servers = server_block("flaky", "ok") + server_block("steady", "ok")

    def setUp(self):
        self.llm = self.calm = FakeLLM()
        self.addCleanup(self.llm.stop)
        os.environ["FAKE_LLM_KEY"] = KEY
        self.start_broker(self.config(), users=())

    def server(self, name):
        status, doc = self.b.get("/readyz")
        return status, [s for s in doc["servers"] if s["name"] == name][0]

    def test_crash_loop_is_degraded_then_recovers(self):
        for i in range(5):
            pid = wait_for(lambda: self.b.processes()["worker flaky"]["pid"]
                           if self.b.processes()["worker flaky"]["state"] ==
                           "running" else 0, timeout=30, what="the worker")
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not pid_alive(pid), what="the worker gone")
        self.b.wait_log(r"server flaky is crash-looping: 5 exits in 60 s; "
                        r"last: worker killed by signal 9")
        status, flaky = self.server("flaky")
        self.assertEqual(status, 503)
        self.assertTrue(flaky["crash_loop"])
        self.assertIn("crash-looping", flaky["error"])
        self.assertEqual(self.server("steady")[1]["state"], "ready")
        # Back up, still degraded: up is not yet stable.
        wait_for(lambda: self.server("flaky")[1]["state"] == "degraded",
                 timeout=25, what="degraded while up")
        self.assertEqual(self.b.get("/readyz")[0], 503)
        r = self.b.ctl("server", "call", "steady", "echo", '{"text":"hi"}')
        self.assertIn("hi", r.stdout)
        trail = self.b.ctl("audit", "show", "-k", "system").stdout
        self.assertEqual(trail.count("crash_loop"), 1, trail)
        # Ready once it has stayed up.
        wait_for(lambda: self.b.get("/readyz")[0] == 200, timeout=40,
                 what="ready again")
        self.b.wait_log(r"server flaky: no longer crash-looping")
        self.assertNotIn("crash_loop", self.server("flaky")[1])
        self.assertEqual(self.b.ctl("audit", "verify",
                                    check=False).returncode, 0)


if __name__ == "__main__":
    unittest.main()
