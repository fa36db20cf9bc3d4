"""Start the real mcpbroker daemon for a test and talk to it.

Standard library only.  Each Broker gets its own directory with a config,
state dir and control socket, a free port on 127.0.0.1, and captures the
daemon's stderr (it runs with -d) so tests can read its log.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time

BIN = os.environ.get("MCPBROKER_BIN",
                     os.path.join(os.path.dirname(__file__), "../../build/bin"))
MCPBROKER = os.path.join(BIN, "mcpbroker")
MCPBROKERCTL = os.path.join(BIN, "mcpbrokerctl")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout=10.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %.1fs waiting for %s (last: %r)"
                         % (timeout, what, last))


# What the ASan, LSan and UBSan runtimes print when they find something,
# in any process of the daemon: in a sanitizer build a child that trips
# one dies and is restarted, so only its report tells.
SANITIZER_REPORT = re.compile(
    r"^==\d+==ERROR: (Address|Leak)Sanitizer|^\S+:\d+:\d+: runtime error: ",
    re.M)


def sanitizer_report(log):
    """The sanitizer report in a log, from its first line, or None."""
    m = SANITIZER_REPORT.search(log)
    return log[m.start():m.start() + 4000] if m else None


def pid_alive(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("State:"):
                    return "Z" not in line.split()[1]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return False


def proc_status(pid):
    fields = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            fields[k] = v.strip()
    return fields


class Broker:
    def __init__(self, body="", user=None, extra_args=(), tls=None,
                 wrap=()):
        self.dir = tempfile.mkdtemp(prefix="mcpbroker-test-")
        os.chmod(self.dir, 0o755)
        self.port = free_port()
        self.conf = os.path.join(self.dir, "mcpbroker.conf")
        self.sock = os.path.join(self.dir, "control.sock")
        self.user = user or ("nobody" if os.geteuid() == 0 else "_unused")
        self.extra_args = list(extra_args)
        self.tls = tls      # (certificate, key) paths, or None
        self.wrap = list(wrap)  # a command to run the daemon under
        self.write_config(body)
        self.proc = None
        self.log_lines = []
        self._log_thread = None

    def config_text(self, body):
        listen = "listen on 127.0.0.1 port %d" % self.port
        if self.tls:
            listen += ' tls certificate "%s" key "%s"' % self.tls
        return ('user "%s"\nstate-dir "%s/state"\ncontrol socket "%s"\n'
                '%s\n%s\n'
                % (self.user, self.dir, self.sock, listen, body))

    def write_config(self, body, raw=None):
        with open(self.conf, "w") as f:
            f.write(raw if raw is not None else self.config_text(body))

    # -- process --------------------------------------------------------
    def start(self, wait_ready=True):
        self.proc = subprocess.Popen(
            self.wrap + [MCPBROKER, "-d", "-v", "-f", self.conf] +
            self.extra_args,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, errors="replace")
        self._log_thread = threading.Thread(target=self._read_log,
                                            daemon=True)
        self._log_thread.start()
        wait_for(self._healthy, timeout=15, what="/healthz")
        if wait_ready:
            wait_for(lambda: self.get("/readyz")[0] == 200, timeout=15,
                     what="/readyz 200")
        return self

    def _read_log(self):
        for line in self.proc.stderr:
            self.log_lines.append(line.rstrip("\n"))

    def log(self):
        return "\n".join(self.log_lines)

    def wait_log(self, pattern, timeout=10):
        rx = re.compile(pattern)
        return wait_for(lambda: rx.search(self.log()), timeout=timeout,
                        what="log line matching %r" % pattern)

    def _healthy(self):
        if self.proc.poll() is not None:
            raise AssertionError("mcpbroker exited with %s:\n%s"
                                 % (self.proc.returncode, self.log()))
        try:
            return self.get("/healthz")[0] == 200
        except OSError:
            return False

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=10):
        return self.proc.wait(timeout=timeout)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log_thread is not None:
            self._log_thread.join(timeout=5)
            self.proc.stderr.close()
            self._log_thread = None
        shutil.rmtree(self.dir, ignore_errors=True)
        report = sanitizer_report(self.log())
        if report is not None:
            raise AssertionError("a sanitizer report in the daemon's "
                                 "log:\n" + report)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- HTTP -----------------------------------------------------------
    def request(self, method, path, body=None, headers=None, timeout=10):
        if self.tls:
            ctx = ssl.create_default_context(cafile=self.tls[0])
            conn = http.client.HTTPSConnection("127.0.0.1", self.port,
                                               timeout=timeout, context=ctx)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                              timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            data = r.read()
            return r.status, dict(r.getheaders()), data
        finally:
            conn.close()

    def get(self, path):
        status, headers, data = self.request("GET", path)
        try:
            doc = json.loads(data) if data else None
        except ValueError:
            doc = data
        return status, doc

    # -- control socket -------------------------------------------------
    def ctl(self, *args, check=True):
        r = subprocess.run([MCPBROKERCTL, "-s", self.sock] + list(args),
                           capture_output=True, text=True, timeout=30)
        if sanitizer_report(r.stderr) is not None:
            raise AssertionError("a sanitizer report from mcpbrokerctl:\n"
                                 + sanitizer_report(r.stderr))
        if check and r.returncode != 0:
            raise AssertionError("mcpbrokerctl %s: %d\n%s%s"
                                 % (" ".join(args), r.returncode, r.stdout,
                                    r.stderr))
        return r

    def processes(self):
        """{name: {pid, state, restarts}} from `mcpbrokerctl status`."""
        out = self.ctl("status").stdout.splitlines()
        procs = {}
        for line in out[1:]:
            m = re.match(r"^(.+?)\s+(-?\d+)\s+(\S+)\s+(\d+)", line)
            if m:
                procs[m.group(1)] = {"pid": int(m.group(2)),
                                     "state": m.group(3),
                                     "restarts": int(m.group(4))}
        return procs

    def child_pids(self):
        return [p["pid"] for n, p in self.processes().items()
                if n != "parent" and p["pid"] > 0]
