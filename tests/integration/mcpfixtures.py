"""Where the MCP test servers are, and how to run mcpbrokerctl mcp."""
import functools
import os
import subprocess
import threading
import time

from broker import MCPBROKERCTL, sanitizer_report

SRC = os.environ.get("MCPBROKER_SRC",
                     os.path.join(os.path.dirname(__file__), "../.."))
TESTS = os.path.abspath(os.path.join(SRC, "tests"))
FIXTURES = os.path.join(TESTS, "fixtures")
MODULES = os.path.join(TESTS, "node_modules", "@modelcontextprotocol")
EVERYTHING = os.path.join(MODULES, "server-everything", "dist", "index.js")
FILESYSTEM = os.path.join(MODULES, "server-filesystem", "dist", "index.js")
V2_SERVER = os.path.join(FIXTURES, "mcp_v2_server.mjs")
HOSTILE = os.path.join(FIXTURES, "hostile_mcp_server.py")
NET_PROBE = os.path.join(FIXTURES, "net_probe.py")


@functools.lru_cache(maxsize=1)
def node():
    """The Node >= 22 binary, installing the test packages if needed."""
    return subprocess.run(["bash", os.path.join(TESTS, "setup-node.sh")],
                          check=True, capture_output=True,
                          text=True).stdout.strip()


def everything_cmd(transport="stdio"):
    return [node(), EVERYTHING, transport]


def v2_cmd(*args):
    return [node(), V2_SERVER] + list(args)


def hostile_cmd(mode):
    return ["python3", HOSTILE, mode]


class Result:
    def __init__(self, returncode, stdout, stderr, peak_rss_kb):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.peak_rss_kb = peak_rss_kb   # mcpbrokerctl's own, not the server's

    def json(self):
        import json
        return json.loads(self.stdout)


def ctl_mcp(op, target, *rest, timeout_ms=None, env_names=(), env=None,
            wall=60):
    """mcpbrokerctl mcp OP ... ; target is a URL or a command list."""
    args = [MCPBROKERCTL, "mcp", op]
    if timeout_ms is not None:
        args += ["-T", str(timeout_ms)]
    for name in env_names:
        args += ["-e", name]
    if isinstance(target, str) and target == "--sse":
        args += ["--sse"] + list(rest)
    elif isinstance(target, str):
        args += [target] + list(rest)
    else:
        args += ["--"] + list(target) + list(rest)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            errors="replace")
    peak = [0]

    def watch():
        # VmHWM only grows: the last reading before exit is the peak.
        while proc.poll() is None:
            try:
                with open("/proc/%d/status" % proc.pid) as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak[0] = max(peak[0], int(line.split()[1]))
            except (OSError, ValueError):
                pass
            time.sleep(0.02)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        out, err = proc.communicate(timeout=wall)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise
    t.join()
    if sanitizer_report(err) is not None:
        raise AssertionError("a sanitizer report from mcpbrokerctl:\n"
                             + sanitizer_report(err))
    return Result(proc.returncode, out, err, peak[0])


class HttpServer:
    """A Node MCP server listening on a free loopback port, for one test."""

    def __init__(self, cmd, port, env=None):
        import socket as _socket
        self.port = port
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                _socket.create_connection(("127.0.0.1", port), 0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise AssertionError("MCP server %r did not listen on %d"
                             % (cmd, port))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def everything_http(transport):
    """server-everything over streamableHttp or sse (PORT picks its port)."""
    from broker import free_port
    import os as _os
    port = free_port()
    env = dict(_os.environ, PORT=str(port))
    return HttpServer(everything_cmd(transport), port, env=env)


def v2_http():
    from broker import free_port
    port = free_port()
    return HttpServer(v2_cmd("http", str(port), "127.0.0.1"), port)
