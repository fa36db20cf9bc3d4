"""The parent under valgrind: start, supervise, reload, answer the control
socket and shut down with no invalid access and no definite leak.  (The
children are sandboxed: seccomp leaves valgrind no room there; ASan covers
them in the sanitizer build.)"""
import os
import shutil
import signal
import subprocess
import unittest

from broker import MCPBROKER, Broker, wait_for

OK_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "..", "fixtures", "hostile_mcp_server.py")


def sanitized():
    out = subprocess.run(["ldd", MCPBROKER], capture_output=True,
                         text=True).stdout
    return "libasan" in out or "libubsan" in out


@unittest.skipIf(shutil.which("valgrind") is None or sanitized(),
                 "needs valgrind and a build without sanitizers")
class ParentUnderValgrindTest(unittest.TestCase):
    def test_core_paths(self):
        b = Broker('auth { api-keys }\n'
                   'server "ok" { command "python3" "%s" "ok" }\n'
                   'provider "llm" { type ollama base-url '
                   '"http://127.0.0.1:1" model "m" }' % OK_SERVER)
        self.addCleanup(b.stop)
        b.proc = subprocess.Popen(
            ["valgrind", "-q", "--error-exitcode=99", "--leak-check=full",
             "--errors-for-leak-kinds=definite", "--trace-children=no",
             MCPBROKER, "-d", "-f", b.conf],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, errors="replace")
        import threading
        b._log_thread = threading.Thread(target=b._read_log, daemon=True)
        b._log_thread.start()
        wait_for(lambda: b._healthy(), timeout=60, what="/healthz")
        wait_for(lambda: b.get("/readyz")[0] == 200, timeout=60,
                 what="/readyz")
        b.ctl("status")
        b.ctl("user", "add", "alice")
        b.signal(signal.SIGHUP)
        b.wait_log("configuration reloaded", timeout=30)
        os.kill(b.processes()["worker ok"]["pid"], signal.SIGKILL)
        b.wait_log(r"restarting worker ok", timeout=30)
        wait_for(lambda: b.get("/readyz")[0] == 200, timeout=60)
        b.signal(signal.SIGTERM)
        code = b.wait_exit(timeout=60)
        self.assertEqual(code, 0, b.log())


if __name__ == "__main__":
    unittest.main()
