"""The sandbox as the running daemon shows it: a child that makes a system
call its seccomp policy forbids dies of SIGSYS, the parent names the call,
records it in the audit trail, and restarts the worker under the usual
backoff.  (tests/sandbox/test_seccomp.c checks the policy cell by cell.)

The forbidden call is injected with gdb, which needs root to attach to a
non-dumpable process; without root or gdb the test is skipped."""
import json
import os
import shutil
import subprocess
import unittest

from broker import Broker, wait_for

SYS_MOUNT = 165     # x86_64


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("gdb") and
                     os.uname().machine == "x86_64",
                     "needs root, gdb and x86_64 to inject a system call")
class SeccompKillTest(unittest.TestCase):
    def setUp(self):
        # An unreachable url: the worker runs (and retries) without a server.
        self.b = Broker('server "probe" { url "http://127.0.0.1:1/mcp" }')
        self.addCleanup(self.b.stop)
        self.b.start(wait_ready=False)
        wait_for(lambda: self.b.processes().get("worker probe", {}).get("pid", 0)
                 > 0, what="the worker to run")

    def inject(self, pid, nr):
        """Make process pid call syscall(nr) and let the signal through."""
        subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx",
                        "-ex", "print (long)syscall(%d, 0, 0, 0, 0, 0)" % nr,
                        "-ex", "continue"],
                       capture_output=True, timeout=60)

    def test_forbidden_call_is_named_audited_and_restarted(self):
        pid = self.b.processes()["worker probe"]["pid"]
        self.inject(pid, SYS_MOUNT)
        self.b.wait_log(r"worker probe \(pid %d\) killed by seccomp: "
                        r"forbidden system call 165 \(mount\); restarting"
                        % pid, timeout=30)
        wait_for(lambda: self.b.processes()["worker probe"]["restarts"] >= 1 and
                 self.b.processes()["worker probe"]["pid"] not in (0, pid),
                 timeout=30, what="the worker to be restarted")

        def audited():
            rows = json.loads(
                "[" + ",".join(self.b.ctl("audit", "export").stdout
                               .splitlines()) + "]")
            return [r for r in rows if r.get("kind") == "system" and
                    "seccomp" in json.dumps(r)]
        rows = wait_for(audited, timeout=10, what="the audit row")
        self.assertIn("forbidden system call 165 (mount)",
                      json.dumps(rows[-1]))


if __name__ == "__main__":
    unittest.main()
