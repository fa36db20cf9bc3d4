#!/usr/bin/env python3
"""Soak: many SSE chats and MCP gateway clients at once, for minutes.

One broker (a release build), one LLM and one MCP server, and two loads
side by side for --duration seconds:

  chats        --chats clients, each its own user with an API key and a
               session (`/llmchat/connect`), on one keep-alive connection.
               Each sends a message (`/llmchat/chat`, streamed), reads the
               event stream to its end, checks it, and sends the next;
               after --turns messages it starts a new conversation
               (`DELETE /llmchat/history`), and at the end it disconnects.
  MCP clients  --mcp-clients 2025-06-18 sessions on /mcp/soak (--mcp-era
               2026: stateless 2026-07-28 clients), each its own user,
               calling `echo.echo` (tests/bench/mcp_load, paced at
               --mcp-rate calls/s over all of them, the sessions ended
               with DELETE at the end).

The LLM runs in a process of its own (this file, --serve-llm): an
OpenAI-compatible endpoint whose requests are checked, and whose answers
are made, by tests/fixtures/fake_llm.py.  To each message it first answers
with a call of the echo tool, carrying the message, after --llm-delay-ms;
given the tool's result it streams "echo said: MESSAGE" and more words,
--tokens tokens in all, --token-interval-ms apart.  So every turn is two
LLM requests, one audited tool call on tests/fixtures/echo_mcp.mjs (via
node, `isolation shared`) and a stream of tokens; the client checks that
it got tool_start and tool_end with its own message, every token, and a
final whose text is the tokens' and names the tool.

Every --sample-interval seconds each of the broker's processes (parent,
frontend, controller, worker, the echo server) is sampled: RSS (VmRSS),
open descriptors (/proc/PID/fd) and CPU, with the frontend's open SSE
streams and request count from /metrics.  At the end the load stops (the
chats finish their turns), and the checks are:

  errors     none: every turn and every MCP call good, no LLM request
             refused or cut, no process restarted, no error in the log
  RSS        flat over the last half of the run: for each process, the
             least-squares line through its samples there grows by less
             than max(2 MiB, 2% of its mean RSS) over that half
  fds        flat: in the last half, the last minute's lowest count is
             above every earlier minute's lowest by less than max(16, 5%)
             (a leak raises the floor for good; descriptors of requests
             in flight come and go with the load, and a stall empties
             them for a while), and, once the load is gone and the
             controller's idle provider connections have expired, each
             process back to the count it had before it
  audit      each chat tool call (as the clients saw them) a `tool_call`
             row, each MCP call answered one (and none beyond those
             sent), each intent exactly one `tool_result` row, each
             session start its `auth` row; `mcpbrokerctl audit verify`

It prints a verdict and a Markdown table for docs/PERFORMANCE.md, and
exits 1 if a check failed.

What the configuration allows, and why this load is within it: a user
has one chat session, so each chat is its own user; a user keeps at most
32 MCP sessions (4,096 in all), so each MCP client is one too; no budget,
no `rate` on the rule; limits at their defaults (llm-timeout 2m and
tool-timeout 30s written out).  Fixed in the code and not reached here: 4,096
requests waiting in the frontend (chats + MCP clients), 4,096
connections in progress for the controller (one per LLM request), 256
requests in flight to one server instance (the shared echo server: the
calls of chats and MCP clients at one moment).  The soak raises its own
RLIMIT_NOFILE to the hard limit, which the daemon inherits: the frontend
needs a descriptor per client, the controller one per LLM request.

The MCP sessions' replay rings (256 events each, one event per call) fill
during the run; at --mcp-rate / --mcp-clients calls a second per session
they are full after 256 / that seconds, which must fall in the first half
of the run for its last half to be flat (the script says so when not).

    cmake --build build --target mcpbroker mcpbrokerctl bench
    python3 tests/bench/soak.py --bin build/bin [--duration 600]
        [--chats 1000] [--mcp-clients 200] [--mcp-rate 200] [--mcp-era 2025]
        [--tokens 50] [--token-interval-ms 200] [--llm-delay-ms 1000]
        [--turns 5] [--sample-interval 10] [--state-dir DIR] [--keep]
"""
import argparse
import asyncio
import collections
import concurrent.futures
import json
import os
import re
import resource
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ECHO = os.path.join(TESTS, "fixtures", "echo_mcp.mjs")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(TESTS, "integration"))
sys.path.insert(0, os.path.join(TESTS, "fixtures"))

MiB = 1024 * 1024
TCK = os.sysconf("SC_CLK_TCK")
TOOLSET = "soak"


def log(msg):
    print(msg, flush=True)


# ---- the LLM (its own process) ---------------------------------------------

class LlmStats:
    def __init__(self):
        self.requests = 0
        self.tool_answers = 0
        self.text_answers = 0
        self.refused = 0        # requests fake_llm's checks refused
        self.cut = 0            # answers whose connection broke mid-way
        self.connections = 0
        self.active = 0
        self.max_active = 0
        self.problems = collections.Counter()
        self.first = {}

    def problem(self, kind, detail):
        self.problems[kind] += 1
        self.first.setdefault(kind, detail[:300])


def llm_server(opts):
    import fake_llm

    stats = LlmStats()
    words = "".join(" w%d" % i for i in range(max(0, opts.tokens - 3)))

    async def send(writer, status, obj, ctype="application/json"):
        body = json.dumps(obj).encode()
        writer.write(b"HTTP/1.1 %d X\r\nContent-Type: %s\r\n"
                     b"Content-Length: %d\r\n\r\n%s"
                     % (status, ctype.encode(), len(body), body))
        await writer.drain()

    async def answer(writer, raw):
        stats.requests += 1
        try:
            req = json.loads(raw)
            fake_llm.validate_openai(req, False)
        except fake_llm.Reject as r:
            stats.refused += 1
            stats.problem("refused %d" % r.status, json.dumps(r.body))
            return await send(writer, r.status, r.body)
        except ValueError as e:
            stats.refused += 1
            stats.problem("bad JSON", str(e))
            return await send(writer, 400, {"error": {"message": str(e)}})
        msgs = req["messages"]
        last = msgs[-1]
        if last.get("role") == "tool":
            text = "echo said: " + fake_llm.text_of(last.get("content"))
            step = {"text": text + words,
                    "usage": {"input": len(raw) // 4, "output": opts.tokens}}
            stats.text_answers += 1
            paced = True
        else:
            user = [m for m in msgs if m.get("role") == "user"]
            said = fake_llm.text_of(user[-1].get("content")) if user else ""
            names = [t["function"]["name"] for t in req.get("tools") or []
                     if t["function"]["name"].endswith("echo")]
            if not names:
                stats.problem("no echo tool offered", json.dumps(req)[:300])
                return await send(writer, 400, {"error": {
                    "message": "no echo tool in the request"}})
            step = {"tool_calls": [{"name": names[0],
                                    "arguments": {"message": said}}],
                    "usage": {"input": len(raw) // 4, "output": 12}}
            stats.tool_answers += 1
            paced = False
        plan = fake_llm.Plan(step, "openai", req)
        events = fake_llm.openai_stream(plan, req, req["model"], False)
        writer.write(b"HTTP/1.1 200 OK\r\n"
                     b"Content-Type: text/event-stream; charset=utf-8\r\n"
                     b"Transfer-Encoding: chunked\r\nCache-Control: no-cache"
                     b"\r\nx-request-id: req_%s\r\n\r\n"
                     % secrets.token_hex(16).encode())
        await writer.drain()
        await asyncio.sleep(opts.llm_delay_ms / 1000)
        for i, ev in enumerate(events):
            # events: the role, a chunk per token, the finish, usage, DONE
            if paced and 2 <= i <= opts.tokens:
                await asyncio.sleep(opts.token_interval_ms / 1000)
            writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def handle(reader, writer):
        stats.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return          # closed between requests: fine
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                hdrs = {}
                for ln in lines[1:]:
                    k, _, v = ln.partition(":")
                    hdrs[k.strip().lower()] = v.strip()
                n = int(hdrs.get("content-length") or 0)
                raw = await reader.readexactly(n) if n else b""
                if method == "GET" and path == "/_stats":
                    d = dict(vars(stats))
                    d["problems"] = dict(stats.problems)
                    await send(writer, 200, d)
                elif method == "POST" and path.endswith("/chat/completions"):
                    stats.active += 1
                    stats.max_active = max(stats.max_active, stats.active)
                    try:
                        await answer(writer, raw)
                    except (ConnectionError, asyncio.IncompleteReadError):
                        stats.cut += 1
                        return
                    finally:
                        stats.active -= 1
                else:
                    await send(writer, 404, {"error": {"message": path}})
                if hdrs.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            stats.problem("connection", repr(e))
        finally:
            writer.close()

    async def serve():
        server = await asyncio.start_server(handle, "127.0.0.1", 0,
                                            backlog=4096)
        print("PORT=%d" % server.sockets[0].getsockname()[1], flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        parent = os.getppid()
        while not stop.is_set() and os.getppid() == parent:
            try:
                await asyncio.wait_for(stop.wait(), 1)
            except asyncio.TimeoutError:
                pass
        server.close()

    asyncio.run(serve())


# ---- an HTTP/1.1 client with keep-alive and event streams -----------------

class Broken(Exception):
    """A reply that is not HTTP, or a connection lost in the middle."""


class Http:
    def __init__(self, port, key):
        self.port, self.key = port, key
        self.reader = self.writer = None
        self.reopened = 0       # keep-alive connections the server had shut

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, method, path, body=None):
        """(status, headers, body bytes, events): events is a list of
        (name, data) for an event stream, else None."""
        payload = json.dumps(body).encode() if body is not None else b""
        head = ("%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                "Authorization: Bearer %s\r\n"
                "Content-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n"
                % (method, path, self.port, self.key, len(payload))).encode()
        for attempt in (0, 1):
            fresh = self.writer is None
            if fresh:
                self.reader, self.writer = await asyncio.open_connection(
                    "127.0.0.1", self.port, limit=1 << 20)
            try:
                self.writer.write(head + payload)
                await self.writer.drain()
                line = await self.reader.readline()
            except ConnectionError:
                line = b""
            if line:
                break
            self.close()
            if fresh or attempt:
                raise Broken("connection closed before the status line")
            self.reopened += 1
        try:
            return await self._reply(line)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError,
                IndexError) as e:
            self.close()
            raise Broken("%s %s: %r" % (method, path, e))

    async def _reply(self, line):
        status = int(line.split(None, 2)[1])
        headers = {}
        while True:
            ln = await self.reader.readline()
            if ln in (b"\r\n", b"\n"):
                break
            if not ln:
                raise Broken("connection closed in the headers")
            k, _, v = ln.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        sse = headers.get("content-type", "").startswith("text/event-stream")
        events = [] if sse else None
        body = bytearray()
        pending = b""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await self.reader.readline()).split(b";")[0], 16)
                if size == 0:
                    while (await self.reader.readline()) not in (b"\r\n",
                                                                 b"\n", b""):
                        pass
                    break
                data = (await self.reader.readexactly(size + 2))[:-2]
                if not sse:
                    body += data
                    continue
                pending += data
                while b"\n\n" in pending:
                    ev, pending = pending.split(b"\n\n", 1)
                    name, data_ = "message", ""
                    for el in ev.decode().split("\n"):
                        if el.startswith("event:"):
                            name = el[6:].strip()
                        elif el.startswith("data:"):
                            data_ += el[5:].lstrip()
                    events.append((name, data_))
        elif "content-length" in headers:
            body += await self.reader.readexactly(
                int(headers["content-length"]))
        else:
            body += await self.reader.read()
            self.close()
        if headers.get("connection", "").lower() == "close":
            self.close()
        if pending.strip():
            raise Broken("an event stream ended in the middle of an event")
        return status, headers, bytes(body), events


# ---- the chat clients -------------------------------------------------------

class ChatStats:
    def __init__(self):
        self.turns = 0
        self.tool_calls = 0     # tool_start events seen
        self.tokens = 0
        self.connects = 0
        self.conversations = 0
        self.latency = []       # (done, seconds) of each good turn
        self.errors = collections.Counter()
        self.first = {}
        self.active = 0         # clients in a turn now

    def error(self, kind, detail):
        self.errors[kind] += 1
        self.first.setdefault(kind, detail[:400])


def check_turn(msg, status, headers, body, events, opts):
    """None if the streamed turn is what it must be, else (kind, detail)."""
    if status != 200:
        return "chat: HTTP %d" % status, body.decode(errors="replace")
    if events is None:
        return "chat: not an event stream", repr(headers)
    names = [n for n, _ in events]
    docs = []
    for n, d in events:
        try:
            docs.append(json.loads(d))
        except ValueError:
            return "chat: event data not JSON", "%s: %s" % (n, d[:200])
    if "error" in names:
        return ("chat: error event",
                json.dumps(docs[names.index("error")]))
    if not names or names[-1] != "final":
        return "chat: stream without a final event", repr(names[-5:])
    want = ["tool_start", "tool_end"] + ["token"] * opts.tokens + ["final"]
    if names != want:
        return ("chat: events not tool_start, tool_end, %d tokens, final"
                % opts.tokens, repr(collections.Counter(names)))
    start, end, final = docs[0], docs[1], docs[-1]
    if (start.get("tool") != "echo" or start.get("server") != "echo" or
            start.get("input") != {"message": msg}):
        return "chat: tool_start not the call asked for", json.dumps(start)
    if end.get("output") != msg or end.get("id") != start.get("id"):
        return "chat: tool_end not the message echoed", json.dumps(end)
    text = "".join(d.get("content", "") for d in docs[2:-1])
    if final.get("content") != text:
        return "chat: final content is not the tokens streamed", \
            json.dumps(final)[:300]
    if not text.startswith("echo said: " + msg):
        return "chat: answer is not this turn's", text[:200]
    if final.get("tools_used") != ["echo.echo"]:
        return "chat: final tools_used", json.dumps(final.get("tools_used"))
    return None


async def chat_client(i, key, port, opts, stats, stop, start_delay):
    http = Http(port, key)
    await asyncio.sleep(start_delay)
    try:
        st, _, body, _ = await http.request(
            "POST", "/llmchat/connect", {"provider": "llm",
                                         "toolset": TOOLSET})
    except (Broken, OSError) as e:
        stats.error("connect: connection", repr(e))
        return
    if st != 200:
        stats.error("connect: HTTP %d" % st, body.decode(errors="replace"))
        return
    stats.connects += 1
    stats.conversations += 1
    conv = 1
    while not stop.is_set():
        for turn in range(1, opts.turns + 1):
            if stop.is_set():
                break
            msg = "c%d-%d-%d-%s" % (i, conv, turn, secrets.token_hex(4))
            t = time.monotonic()
            stats.active += 1
            try:
                r = await asyncio.wait_for(
                    http.request("POST", "/llmchat/chat", {"message": msg}),
                    opts.turn_timeout)
                bad = check_turn(msg, *r, opts)
            except asyncio.TimeoutError:
                http.close()
                bad = ("chat: no end within %d s" % opts.turn_timeout, msg)
            except (Broken, OSError) as e:
                http.close()
                bad = ("chat: connection", repr(e))
            finally:
                stats.active -= 1
            if bad is not None:
                stats.error(*bad)
                await asyncio.sleep(1)
                continue
            done = time.monotonic()
            stats.turns += 1
            stats.tool_calls += 1
            stats.tokens += opts.tokens
            stats.latency.append((done, done - t))
            if opts.think_ms:
                await asyncio.sleep(opts.think_ms / 1000)
        if stop.is_set():
            break
        try:
            st, _, body, _ = await http.request("DELETE", "/llmchat/history")
        except (Broken, OSError) as e:
            stats.error("new conversation: connection", repr(e))
            continue
        if st != 200:
            stats.error("new conversation: HTTP %d" % st,
                        body.decode(errors="replace"))
            continue
        stats.conversations += 1
        conv += 1
    try:
        st, _, body, _ = await http.request("POST", "/llmchat/disconnect")
        if st != 200:
            stats.error("disconnect: HTTP %d" % st,
                        body.decode(errors="replace"))
    except (Broken, OSError) as e:
        stats.error("disconnect: connection", repr(e))
    http.close()


# ---- sampling the broker's processes ----------------------------------------

def proc_sample(pid):
    """(RSS, open fds, CPU seconds, anonymous RSS) of PID (bytes), or None
    if it is gone."""
    try:
        rss = anon = 0
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) * 1024
        fds = len(os.listdir("/proc/%d/fd" % pid))
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / TCK
        return rss, fds, cpu, anon
    except (FileNotFoundError, ProcessLookupError):
        return None


def descendants(root):
    kids = collections.defaultdict(list)
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue
        kids[ppid].append(int(p))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for k in kids.get(pid, []):
            out.append(k)
            todo.append(k)
    return out


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return "?"


def broker_processes(broker):
    """{label: pid}: the processes `mcpbrokerctl status` names, and the
    server instances (the parent's other descendants)."""
    procs = {}
    for name, p in broker.processes().items():
        if p["pid"] > 0:
            procs[name] = p["pid"]
    known = set(procs.values())
    for pid in descendants(broker.proc.pid):
        if pid not in known:
            procs["instance %s" % comm(pid)] = pid
    procs["parent"] = broker.proc.pid
    return procs


def parse_metrics(text):
    out = collections.defaultdict(float)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-z_]+)(\{[^}]*\})?\s+(\S+)$", line)
        if not m:
            continue
        name, labels, value = m.groups()
        out[name] += float(value)
        if name == "mcpbroker_audit_rows_total" and labels:
            kind = re.search(r'kind="([^"]*)"', labels)
            if kind:
                out["audit_rows:" + kind.group(1)] += float(value)
    return out


class Sampler:
    def __init__(self, procs, port, admin_key, llm_pid, opts):
        self.procs = procs
        self.names = list(procs)
        self.http = Http(port, admin_key)
        self.llm_pid = llm_pid
        self.opts = opts
        self.samples = []       # {t, procs: {name: (rss, fds, cpu)}, ...}
        self.gone = set()
        self.t0 = None
        self.last = None

    async def metrics(self):
        """The metrics, on a connection of their own, closed after (so
        that the frontend's descriptors count the load's alone)."""
        try:
            st, _, body, _ = await self.http.request("GET", "/metrics")
        except (Broken, OSError):
            return {}
        finally:
            self.http.close()
        return parse_metrics(body.decode()) if st == 200 else {}

    async def take(self, chats, mcp_progress, phase):
        now = time.monotonic()
        t = now - self.t0 if self.t0 is not None else 0.0
        s = {"t": t, "mono": now, "phase": phase, "procs": {}}
        for name, pid in self.procs.items():
            v = proc_sample(pid)
            if v is None:
                self.gone.add(name)
            else:
                s["procs"][name] = v
        s["llm_cpu"] = (proc_sample(self.llm_pid) or (0, 0, 0, 0))[2]
        s["self_cpu"] = sum(os.times()[:2])
        s["metrics"] = await self.metrics()
        s["turns"] = chats.turns if chats else 0
        s["chat_errors"] = sum(chats.errors.values()) if chats else 0
        s["mcp"] = dict(mcp_progress) if mcp_progress else {}
        with open("/proc/loadavg") as f:
            s["load"] = f.read().split()[0]
        self.samples.append(s)
        return s

    def header(self):
        short = [short_name(n) for n in self.names]
        log("%6s %7s %7s %7s %7s %5s | %s | %s | %5s %6s %5s %5s %5s" % (
            "t s", "turns/s", "p50 ms", "p99 ms", "mcp/s", "errs",
            " ".join("%8s" % n for n in short),
            " ".join("%6s" % n for n in short), "sse", "broker", "llm",
            "soak", "load"))
        log("%6s %7s %7s %7s %7s %5s | %s | %s | %5s %6s %5s %5s %5s" % (
            "", "", "", "", "", "", ("%-" + str(9 * len(short) - 1) + "s")
            % "RSS MiB", ("%-" + str(7 * len(short) - 1) + "s") % "fds",
            "", "CPU %", "", "", ""))

    def line(self, s, chats):
        prev = self.last
        self.last = s
        dt = s["mono"] - prev["mono"] if prev else 0
        turns_s = (s["turns"] - prev["turns"]) / dt if dt else 0
        lat = []
        if chats and prev:
            lat = sorted(x[1] * 1000 for x in chats.latency
                         if prev["mono"] < x[0] <= s["mono"])
        mcp_s = ((s["mcp"].get("ok_total", 0) - prev["mcp"].get("ok_total", 0))
                 / dt if dt else 0)
        errs = s["chat_errors"] + s["mcp"].get("errors_total", 0)

        def cpu_pct(get):
            if not dt:
                return 0
            return 100 * (get(s) - get(prev)) / dt

        broker_cpu = cpu_pct(lambda x: sum(v[2] for v in x["procs"].values()))
        log("%6.0f %7.0f %7s %7s %7.0f %5d | %s | %s | %5.0f %6.0f %5.0f %5.0f"
            " %5s" % (
                s["t"], turns_s, "%.0f" % pct(lat, 50) if lat else "-",
                "%.0f" % pct(lat, 99) if lat else "-", mcp_s, errs,
                " ".join("%8.1f" % (s["procs"][n][0] / MiB)
                         if n in s["procs"] else "%8s" % "gone"
                         for n in self.names),
                " ".join("%6d" % s["procs"][n][1] if n in s["procs"]
                         else "%6s" % "gone" for n in self.names),
                s["metrics"].get("mcpbroker_sse_streams_open", -1),
                broker_cpu, cpu_pct(lambda x: x["llm_cpu"]),
                cpu_pct(lambda x: x["self_cpu"]), s["load"]))


def short_name(name):
    return {"parent": "parent", "frontend": "frontend",
            "controller": "control"}.get(
                name, name.replace("worker ", "w:").replace("instance ",
                                                            "i:"))[:8]


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def growth(points):
    """Growth of the least-squares line through (t, y) over its t span."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    slope = sum((t - mt) * (y - my) for t, y in points) / var
    return slope * (points[-1][0] - points[0][0])


def floor_rise(points, window=60.0):
    """How far the last window's lowest y is above the highest of the
    earlier windows' lowest: what a leak adds for good."""
    lows = [y for _, y in floor(points, window)]
    return lows[-1] - max(lows[:-1]) if len(lows) > 1 else 0.0


def floor(points, window=60.0):
    """Each window's lowest (t, y): what stays when the load's peaks go."""
    if not points:
        return []
    t0, lows = points[0][0], {}
    for t, y in points:
        k = int((t - t0) // window)
        if k not in lows or y < lows[k][1]:
            lows[k] = (t, y)
    return [lows[k] for k in sorted(lows)]


# ---- the broker -------------------------------------------------------------

def make_broker_class():
    from broker import Broker, wait_for   # after MCPBROKER_BIN is set

    class SoakBroker(Broker):
        """The test harness's broker, logging to a file (a soak's log is
        too long to keep in memory) and without -v."""

        def __init__(self, body, state_dir=None):
            self.state_dir = state_dir
            super().__init__(body)
            self.logpath = os.path.join(self.dir, "broker.log")

        def config_text(self, body):
            text = super().config_text(body)
            if self.state_dir:
                text = text.replace('state-dir "%s/state"' % self.dir,
                                    'state-dir "%s"' % self.state_dir)
            return text

        @property
        def db(self):
            return os.path.join(self.state_dir or
                                os.path.join(self.dir, "state"),
                                "mcpbroker.db")

        def start(self, wait_ready=True):
            import broker as harness
            self.logf = open(self.logpath, "w")
            self.proc = subprocess.Popen(
                [harness.MCPBROKER, "-d", "-f", self.conf],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=self.logf)
            wait_for(self._healthy, timeout=30, what="/healthz")
            wait_for(lambda: self.get("/readyz")[0] == 200, timeout=30,
                     what="/readyz 200")
            return self

        def log(self):
            with open(self.logpath, errors="replace") as f:
                return f.read()

        def stop(self, keep=False):
            if self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.logf.close()
            if not keep:
                shutil.rmtree(self.dir, ignore_errors=True)
                if self.state_dir:
                    shutil.rmtree(self.state_dir, ignore_errors=True)

    return SoakBroker


def add_users(broker, prefix, n, role=None):
    def one(i):
        args = ["user", "add"] + (["-r", role] if role else []) + \
            ["%s%d" % (prefix, i)]
        return broker.ctl(*args).stdout.split()[-1]
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        return list(ex.map(one, range(n)))


def audit_rows(db_path):
    """What the trail holds about tool calls and session starts."""
    db = sqlite3.connect("file:%s?mode=ro" % db_path, uri=True)
    a = {"chat_intents": 0, "mcp_intents": 0, "not_allowed": 0,
         "results": 0, "orphan_results": 0, "connects": 0,
         "outcomes": collections.Counter(), "kinds": collections.Counter()}
    intents = {}
    per_intent = collections.Counter()
    try:
        for kind, n in db.execute("SELECT kind, count(*) FROM audit "
                                  "GROUP BY kind"):
            a["kinds"][kind] = n
        for rid, kind, detail in db.execute(
                "SELECT id, kind, detail FROM audit WHERE kind IN "
                "('tool_call', 'tool_result', 'auth') ORDER BY id"):
            d = json.loads(detail)
            if kind == "tool_call":
                via = "mcp" if d.get("via") == "mcp" else "chat"
                a[via + "_intents"] += 1
                if d.get("decision") != "allow":
                    a["not_allowed"] += 1
                intents[rid] = via
            elif kind == "tool_result":
                a["results"] += 1
                if d.get("intent") in intents:
                    per_intent[d["intent"]] += 1
                    a["outcomes"]["%s %s" % (intents[d["intent"]],
                                             d.get("outcome"))] += 1
                else:
                    a["orphan_results"] += 1
            elif d.get("event") == "connect" and d.get("result") == "success":
                a["connects"] += 1
    finally:
        db.close()
    a["without_result"] = sum(1 for i in intents if per_intent[i] == 0)
    a["several_results"] = sum(1 for i in intents if per_intent[i] > 1)
    return a


# ---- the run ----------------------------------------------------------------

async def llm_stats(port):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /_stats HTTP/1.1\r\nHost: x\r\nConnection: close"
                 b"\r\n\r\n")
    await writer.drain()
    data = await reader.read()
    writer.close()
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


async def run_load(opts, broker, chat_keys, mcp_keyfile, sampler, llm_port):
    chats = ChatStats()
    stop = asyncio.Event()
    mcp_progress = {}
    ramp = min(10.0, opts.duration / 10)

    sampler.t0 = time.monotonic()
    sampler.header()
    sampler.line(await sampler.take(chats, mcp_progress, "load"), chats)

    mcp = None
    mcp_err = None
    if opts.mcp_clients:
        mcp_err = open(os.path.join(broker.dir, "mcp_load.progress"), "w+")
        argv = [os.path.join(opts.bin, "mcp_load"), "http", "-c",
                str(opts.mcp_clients), "-d", str(opts.duration), "-w", "0",
                "-e", str(opts.mcp_era),
                "-p", "1", "-t", "echo.echo", "-k", mcp_keyfile,
                "http://127.0.0.1:%d/mcp/%s" % (broker.port, TOOLSET)]
        if opts.mcp_rate > 0:
            argv[2:2] = ["-r", str(opts.mcp_rate)]
        mcp = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=mcp_err)

    def read_progress():
        if mcp_err is None:
            return
        mcp_err.seek(0)
        for line in mcp_err.read().splitlines()[::-1]:
            if line.startswith("{"):
                try:
                    mcp_progress.update(json.loads(line))
                    return
                except ValueError:
                    pass

    tasks = [asyncio.create_task(chat_client(
        i, k, broker.port, opts, chats, stop, ramp * i / len(chat_keys)))
        for i, k in enumerate(chat_keys)]

    end = sampler.t0 + opts.duration
    next_sample = sampler.t0 + opts.sample_interval
    while True:
        # the last sample at the end; then the load stops (the chats
        # finish the turns they are in)
        target = next_sample if next_sample < end - 1 else end
        await asyncio.sleep(max(0, target - time.monotonic()))
        read_progress()
        sampler.line(await sampler.take(chats, mcp_progress, "load"), chats)
        if target == end:
            break
        next_sample += opts.sample_interval
    stop.set()
    t_stop = time.monotonic()
    pending = ()
    if tasks:
        _, pending = await asyncio.wait(tasks,
                                        timeout=opts.turn_timeout + 30)
    for t in pending:
        t.cancel()
        chats.error("client did not finish its turn after the stop", "")
    drain_s = time.monotonic() - t_stop
    mcp_result = mcp_fail = None
    if mcp is not None:
        try:
            out, _ = await asyncio.wait_for(mcp.communicate(), 120)
            lines = out.decode().strip().splitlines()
            mcp_result = json.loads(lines[-1]) if lines else None
        except asyncio.TimeoutError:
            mcp.kill()
            await mcp.wait()
        read_progress()
        if mcp.returncode != 0 or mcp_result is None:
            mcp_err.seek(0)
            mcp_fail = "mcp_load failed (exit %s): %s" % (
                mcp.returncode, mcp_err.read()[-400:].strip())
            mcp_result = None
        mcp_err.close()
    return (chats, mcp_result, mcp_fail, drain_s,
            await llm_stats(llm_port))


async def settle(sampler, baseline, timeout):
    """Sample until every process is back to its baseline of fds, or
    TIMEOUT seconds have passed; the last sample."""
    deadline = time.monotonic() + timeout
    while True:
        s = await sampler.take(None, None, "after")
        back = all(s["procs"].get(n, (0, 0, 0, 0))[1] <= baseline[n][1]
                   for n in baseline)
        if back or time.monotonic() >= deadline:
            return s
        await asyncio.sleep(2)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(TESTS, "..", "build",
                                                 "bin"))
    p.add_argument("--duration", type=float, default=600)
    p.add_argument("--chats", type=int, default=1000)
    p.add_argument("--mcp-clients", type=int, default=200)
    p.add_argument("--mcp-rate", type=float, default=200,
                   help="MCP tools/call per second over all MCP clients "
                   "(0: as fast as they can)")
    p.add_argument("--mcp-era", type=int, choices=(2025, 2026),
                   default=2025, help="2025: 2025-06-18 sessions (the "
                   "default); 2026: the stateless 2026-07-28 form")
    p.add_argument("--tokens", type=int, default=50,
                   help="tokens in each answer (at least 3)")
    p.add_argument("--token-interval-ms", type=float, default=200)
    p.add_argument("--llm-delay-ms", type=float, default=1000,
                   help="the LLM's time to its first chunk, each request")
    p.add_argument("--turns", type=int, default=5,
                   help="messages per conversation")
    p.add_argument("--think-ms", type=float, default=0,
                   help="pause of a chat client between its turns")
    p.add_argument("--turn-timeout", type=int, default=120)
    p.add_argument("--sample-interval", type=float, default=10)
    p.add_argument("--settle", type=float, default=60,
                   help="seconds at most for fds to come back after the load")
    p.add_argument("--state-dir", metavar="DIR",
                   help="put the broker's database under DIR (default: the "
                   "temporary directory)")
    p.add_argument("--keep", action="store_true",
                   help="keep the broker's directory (log, database)")
    p.add_argument("--serve-llm", action="store_true",
                   help=argparse.SUPPRESS)
    opts = p.parse_args()
    if opts.tokens < 3:
        p.error("--tokens: at least 3")
    if opts.serve_llm:
        return llm_server(opts)
    opts.bin = os.path.abspath(opts.bin)
    for tool in ("mcpbroker", "mcpbrokerctl", "mcp_load"):
        if not os.access(os.path.join(opts.bin, tool), os.X_OK):
            sys.exit("%s/%s missing: cmake --build BUILD --target mcpbroker "
                     "mcpbrokerctl bench" % (opts.bin, tool))
    os.environ["MCPBROKER_BIN"] = opts.bin
    from mcp_gateway_bench import find_node, fsync_ms, loadavg, fmt_int
    node = shutil.which(find_node())
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * (opts.chats + opts.mcp_clients) + 1024
    if hard < need:
        sys.exit("RLIMIT_NOFILE hard limit %d < %d: raise it (ulimit -Hn)"
                 % (hard, need))
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    with open("/proc/cpuinfo") as f:
        model = [ln.split(":", 1)[1].strip() for ln in f
                 if ln.startswith("model name")]
    machine = "%d × %s, kernel %s, %.0f GiB" % (
        os.cpu_count(), model[0] if model else "?", os.uname().release,
        os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30)
    log("machine: %s; node %s; load average %s" % (
        machine, subprocess.run([node, "--version"], capture_output=True,
                                text=True).stdout.strip(), loadavg()))
    turn_floor = (2 * opts.llm_delay_ms + (opts.tokens - 1) *
                  opts.token_interval_ms) / 1000
    if (opts.mcp_clients and opts.mcp_era == 2025 and opts.mcp_rate and
            opts.mcp_rate /
            opts.mcp_clients * opts.duration / 2 < 256):
        log("note: at %.2f calls/s per MCP session, the sessions' replay "
            "rings (256 events each) are still filling in the last half of "
            "the run: expect the controller's RSS to grow by their size"
            % (opts.mcp_rate / opts.mcp_clients))
    log("load: %d chats (answers of %d tokens %.0f ms apart, the LLM "
        "%.0f ms to its first chunk: a turn takes at least %.1f s; %d turns "
        "a conversation), %d MCP clients at %s calls/s, for %.0f s" % (
            opts.chats, opts.tokens, opts.token_interval_ms,
            opts.llm_delay_ms, turn_floor, opts.turns, opts.mcp_clients,
            fmt_int(opts.mcp_rate) if opts.mcp_rate else "full speed",
            opts.duration))

    llm = subprocess.Popen([sys.executable, os.path.abspath(__file__),
                            "--serve-llm", "--tokens", str(opts.tokens),
                            "--token-interval-ms",
                            str(opts.token_interval_ms), "--llm-delay-ms",
                            str(opts.llm_delay_ms)],
                           stdout=subprocess.PIPE, text=True)
    line = llm.stdout.readline()
    if not line.startswith("PORT="):
        llm.kill()
        sys.exit("the LLM did not start")
    llm_port = int(line[5:])

    state_dir = None
    if opts.state_dir:
        state_dir = os.path.join(tempfile.mkdtemp(prefix="mcpbroker-soak-",
                                                  dir=opts.state_dir),
                                 "state")
    # Nothing here tightens or loosens the defaults but the timeouts named:
    # no budgets, no rate in the rule, one user per chat (a user has one
    # chat session) and per MCP client (a user keeps at most 32 sessions).
    body = ('log-format json\n'
            'auth { api-keys }\n'
            'provider "llm" { type openai-compatible base-url '
            '"http://127.0.0.1:%d/v1" model "soak-model" }\n'
            'server "echo" {\n command "%s" "%s"\n isolation shared\n}\n'
            'toolset "%s" { tools "echo.*" }\n'
            'allow tool "*"\n'
            'limits { llm-timeout 2m tool-timeout 30s }\n'
            % (llm_port, node, ECHO, TOOLSET))
    SoakBroker = make_broker_class()
    broker = SoakBroker(body, state_dir)
    failed = True
    try:
        broker.start()
        log("broker: %s (pid %d), log %s" % (opts.bin, broker.proc.pid,
                                             broker.logpath))
        dbdir = os.path.dirname(broker.db)
        log("disk of the database (%s): %s" % (dbdir, fsync_ms(dbdir)))
        t = time.monotonic()
        admin = add_users(broker, "soak-admin", 1, "admin")[0]
        chat_keys = add_users(broker, "c", opts.chats)
        mcp_keys = add_users(broker, "m", opts.mcp_clients)
        mcp_keyfile = os.path.join(broker.dir, "mcp-keys")
        with open(mcp_keyfile, "w") as f:
            f.write("\n".join(mcp_keys) + "\n")
        log("%d users and keys made in %.1f s" % (
            1 + opts.chats + opts.mcp_clients, time.monotonic() - t))
        procs = broker_processes(broker)
        status_before = broker.processes()
        log("processes: %s" % ", ".join("%s %d" % kv for kv in
                                         procs.items()))
        sampler = Sampler(procs, broker.port, admin, llm.pid, opts)

        async def whole():
            base = await sampler.take(None, None, "before")
            sampler.samples.clear()
            res = await run_load(opts, broker, chat_keys, mcp_keyfile,
                                 sampler, llm_port)
            after = await settle(sampler, base["procs"], opts.settle)
            return base, res, after

        base, (chats, mcp, mcp_fail, drain_s, llm_st), after = \
            asyncio.run(whole())
        t_after = after["t"] - opts.duration
        log("after the load (the chats drained in %.1f s; %.0f s later):"
            % (drain_s, t_after))
        sampler.last = None
        sampler.line(after, None)

        time.sleep(1)
        audit = audit_rows(broker.db)
        t = time.monotonic()
        verify = subprocess.run([os.path.join(opts.bin, "mcpbrokerctl"), "-s",
                                 broker.sock, "audit", "verify"],
                                capture_output=True, text=True, timeout=1800)
        verify_s = time.monotonic() - t
        status_after = broker.processes()
        failed = report(opts, machine, procs, base, sampler, after, chats,
                        mcp, mcp_fail, llm_st, audit, verify, verify_s,
                        status_before, status_after, broker, fmt_int)
    finally:
        llm.terminate()
        llm.wait()
        broker.stop(keep=failed or opts.keep)
        if failed or opts.keep:
            print("kept %s%s" % (broker.dir, (" and " + state_dir)
                                 if state_dir else ""), file=sys.stderr)
    sys.exit(1 if failed else 0)


def report(opts, machine, procs, base, sampler, after, chats, mcp, mcp_fail,
           llm_st, audit, verify, verify_s, status_before, status_after,
           broker, fmt_int):
    checks = []

    def check(ok, what):
        checks.append((ok, what))

    load = [s for s in sampler.samples if s["phase"] == "load"]
    half = [s for s in load if s["t"] >= opts.duration / 2 - 0.5]
    span = half[-1]["t"] - half[0]["t"] if len(half) > 1 else 0

    # errors
    n_err = sum(chats.errors.values())
    check(n_err == 0, "chat errors: %d in %s turns" % (
        n_err, fmt_int(chats.turns)))
    for kind, n in chats.errors.most_common():
        log("  chat error %dx %s: %s" % (n, kind, chats.first[kind]))
    mcp_errs = mcp["errors_total"] if mcp else (0 if not opts.mcp_clients
                                                 else -1)
    if opts.mcp_clients:
        check(mcp is not None and mcp_errs == 0,
              "MCP errors: %s in %s calls answered%s" % (
                  mcp_errs, fmt_int(mcp["ok_total"]) if mcp else "?",
                  (" (first: %s)" % mcp["first_error"])
                  if mcp and mcp["first_error"] else
                  (" (%s)" % mcp_fail) if mcp_fail else ""))
    check(llm_st["refused"] == 0 and llm_st["cut"] == 0 and
          not llm_st["problems"],
          "LLM requests: %s on %s connections, at most %d at once; refused "
          "%d, cut short %d%s" % (
              fmt_int(llm_st["requests"]), fmt_int(llm_st["connections"]),
              llm_st["max_active"], llm_st["refused"], llm_st["cut"],
              "".join("; %s: %s" % (k, llm_st["first"].get(k, ""))
                      for k in llm_st["problems"])))
    restarts = {n: status_after[n]["restarts"] -
                status_before.get(n, {"restarts": 0})["restarts"]
                for n in status_after}
    pid_changed = [n for n in status_before if n in status_after and
                   status_before[n]["pid"] != status_after[n]["pid"]]
    check(not sampler.gone and not any(restarts.values()) and
          not pid_changed and broker.proc.poll() is None,
          "processes: none gone or restarted%s" % (
              "" if not (sampler.gone or pid_changed) else
              " (gone: %s)" % ", ".join(sorted(sampler.gone |
                                              set(pid_changed)))))
    levels = collections.Counter()
    firsts = {}
    for line in broker.log().splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        lv = d.get("level", "?")
        levels[lv] += 1
        if lv in ("warning", "err", "error", "crit", "alert", "emerg"):
            key = "%s %s: %s" % (lv, d.get("proc"),
                                 re.sub(r"\d+", "N", d.get("msg", ""))[:120])
            firsts.setdefault(key, [0, d.get("msg", "")])
            firsts[key][0] += 1
    bad_lines = sum(n for lv, n in levels.items()
                    if lv in ("err", "error", "crit", "alert", "emerg"))
    check(bad_lines == 0, "log: %s" % (", ".join(
        "%d %s" % (n, lv) for lv, n in sorted(levels.items())) or "empty"))
    for key, (n, msg) in sorted(firsts.items(), key=lambda x: -x[1][0])[:10]:
        log("  log %dx %s  (e.g. %s)" % (n, key.split(":")[0], msg[:200]))

    # RSS and fds
    rows = []
    for name in sampler.names:
        pts = [(s["t"], s["procs"][name][0]) for s in half
               if name in s["procs"]]
        fpts = [(s["t"], s["procs"][name][1]) for s in half
                if name in s["procs"]]
        if len(pts) < 2:
            check(False, "%s: fewer than 2 samples in the last half" % name)
            continue
        mean = sum(y for _, y in pts) / len(pts)
        g = growth(pts)
        ag = growth([(s["t"], s["procs"][name][3]) for s in half
                     if name in s["procs"]])
        limit = max(2 * MiB, 0.02 * mean)
        fmean = sum(y for _, y in fpts) / len(fpts)
        fg = floor_rise(fpts)
        flimit = max(16, 0.05 * fmean)
        b_fd = base["procs"][name][1] if name in base["procs"] else 0
        a_fd = after["procs"][name][1] if name in after["procs"] else -1
        peak_fd = max(s["procs"][name][1] for s in load if name in
                      s["procs"])
        check(g < limit, "RSS %s: %+.2f MiB over the last %.0f s, %+.1f KiB/s "
              "(limit %.2f MiB; mean %.1f MiB; anonymous memory %+.2f MiB)"
              % (name, g / MiB, span, g / 1024 / span if span else 0,
                 limit / MiB, mean / MiB, ag / MiB))
        check(fg < flimit, "fds %s: the last minute's lowest %+.0f on the "
              "earlier minutes' of the last %.0f s (limit %.1f; mean %.0f)"
              % (name, fg, span, flimit, fmean))
        check(0 <= a_fd <= b_fd, "fds %s after the load: %d (before: %d, "
              "peak %d)" % (name, a_fd, b_fd, peak_fd))
        rows.append((name, base["procs"].get(name, (0,))[0], pts[0][1],
                     pts[-1][1], g, ag, limit, b_fd, peak_fd, a_fd))

    # audit
    chat_calls = chats.tool_calls
    check(audit["chat_intents"] == chat_calls == llm_st["tool_answers"],
          "audit: chat tool calls seen by the clients %s, asked by the LLM "
          "%s, tool_call rows %s" % (fmt_int(chat_calls),
                                     fmt_int(llm_st["tool_answers"]),
                                     fmt_int(audit["chat_intents"])))
    if opts.mcp_clients and mcp:
        check(mcp["ok_total"] <= audit["mcp_intents"] <= mcp["sent_total"],
              "audit: MCP tools/call answered %s, sent %s, tool_call rows %s"
              % (fmt_int(mcp["ok_total"]), fmt_int(mcp["sent_total"]),
                 fmt_int(audit["mcp_intents"])))
    intents = audit["chat_intents"] + audit["mcp_intents"]
    check(audit["without_result"] == 0 and audit["several_results"] == 0 and
          audit["orphan_results"] == 0 and audit["not_allowed"] == 0 and
          audit["results"] == intents,
          "audit: %s tool_call rows, %s tool_result rows (outcomes: %s); "
          "without an outcome %d, with several %d, outcomes of no intent %d"
          % (fmt_int(intents), fmt_int(audit["results"]),
             ", ".join("%s %s" % (k, fmt_int(v)) for k, v in
                       sorted(audit["outcomes"].items())),
             audit["without_result"], audit["several_results"],
             audit["orphan_results"]))
    # An MCP call still unanswered when mcp_load stopped is cancelled by
    # the DELETE of its session; every other outcome is ok.
    chat_bad = sum(v for k, v in audit["outcomes"].items()
                   if k.startswith("chat ") and k != "chat ok")
    mcp_bad = sum(v for k, v in audit["outcomes"].items()
                  if k.startswith("mcp ") and k != "mcp ok")
    unanswered = mcp["sent_total"] - mcp["ok_total"] if mcp else 0
    check(chat_bad == 0 and mcp_bad <= unanswered,
          "audit: outcomes not ok: chat %d, MCP %d (MCP calls unanswered "
          "when the clients stopped: %d)" % (chat_bad, mcp_bad, unanswered))
    check(audit["connects"] == chats.connects,
          "audit: session starts %s, auth connect rows %s" % (
              fmt_int(chats.connects), fmt_int(audit["connects"])))
    check(verify.returncode == 0, "`mcpbrokerctl audit verify` (%.1f s, %s "
          "rows): %s" % (verify_s, fmt_int(sum(audit["kinds"].values())),
                         (verify.stdout + verify.stderr).strip()))

    # verdict
    log("")
    for ok, what in checks:
        log("%s %s" % ("PASS" if ok else "FAIL", what))
    failed = not all(ok for ok, _ in checks)
    log("\nverdict: %s" % ("FAIL" if failed else "PASS"))

    # the table
    lat = [x[1] * 1000 for x in chats.latency]
    dur = opts.duration
    log("\nMarkdown for docs/PERFORMANCE.md:\n")
    log("%s; %.0f s, %d chats (%d tokens %.0f ms apart, LLM first chunk "
        "after %.0f ms, %d turns a conversation), %d MCP clients at %s "
        "calls/s; load average at the end %s.\n" % (
            machine, dur, opts.chats, opts.tokens, opts.token_interval_ms,
            opts.llm_delay_ms, opts.turns, opts.mcp_clients,
            fmt_int(opts.mcp_rate) if opts.mcp_rate else "full speed",
            load[-1]["load"] if load else "?"))
    log("| load | done | per second | latency p50 / p99 / max | errors |")
    log("|---|---:|---:|---:|---:|")
    log("| chat turns (tool call + %d streamed tokens) | %s | %.1f | "
        "%.0f / %.0f / %.0f ms | %d |" % (
            opts.tokens, fmt_int(chats.turns), chats.turns / dur,
            pct(lat, 50), pct(lat, 99), max(lat) if lat else float("nan"),
            n_err))
    if mcp:
        log("| MCP tools/call | %s | %.1f | %.1f / %.1f / %.1f ms | %d |" % (
            fmt_int(mcp["ok_total"]), mcp["calls_per_s"], mcp["p50_ms"],
            mcp["p99_ms"], mcp["max_ms"], mcp_errs))
    log("\n| process | RSS before | RSS at half-time → end | fitted growth, "
        "last %.0f s (limit) | of it anonymous | fds before / peak / after |"
        % span)
    log("|---|---:|---:|---:|---:|---:|")
    for name, b, h, e, g, ag, limit, bf, pf, af in rows:
        log("| %s | %.1f MiB | %.1f → %.1f MiB | %+.2f MiB (%.2f) | "
            "%+.2f MiB | %d / %d / %d |" % (
                name, b / MiB, h / MiB, e / MiB, g / MiB, limit / MiB,
                ag / MiB, bf, pf, af))
    log("\n| audit | count |")
    log("|---|---:|")
    log("| chat tool calls / their `tool_call` rows | %s / %s |" % (
        fmt_int(chat_calls), fmt_int(audit["chat_intents"])))
    if mcp:
        log("| MCP calls answered / sent / their `tool_call` rows | "
            "%s / %s / %s |" % (fmt_int(mcp["ok_total"]),
                               fmt_int(mcp["sent_total"]),
                               fmt_int(audit["mcp_intents"])))
    log("| `tool_result` rows / intents without one | %s / %d |" % (
        fmt_int(audit["results"]), audit["without_result"]))
    log("| `audit verify` | %s |" % ("OK" if verify.returncode == 0 else
                                     "FAILED"))
    return failed


if __name__ == "__main__":
    main()
