"""The sandbox as the running daemon shows it: a child that makes a system
call its seccomp policy forbids dies of SIGSYS, the parent names the call,
records it in the audit trail, and restarts the worker under the usual
backoff.  (tests/sandbox/test_seccomp.c checks the policy cell by cell.)

The forbidden call is injected with gdb, which needs root to attach to a
non-dumpable process; without root or gdb the test is skipped."""
import json
import os
import re
import shutil
import signal
import subprocess
import unittest

from broker import Broker, pid_alive, proc_status, wait_for
from mcpfixtures import NET_PROBE

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
        self.gdb(pid, "print (long)syscall(%d, 0, 0, 0, 0, 0)" % nr,
                 "continue")

    def gdb(self, pid, expr, then="detach"):
        """Make process pid evaluate expr, then go on (or let the signal
        it raised through: continue)."""
        # No debuginfod (CI has no network: a lookup would only wait) and
        # no symbols beyond libc's own table: attaching stays quick.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("DEBUGINFOD")}
        try:
            return subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx",
                                   "-iex", "set debuginfod enabled off",
                                   "-iex", "set auto-load off",
                                   "-ex", expr, "-ex", then],
                                  capture_output=True, text=True,
                                  timeout=120, env=env)
        except subprocess.TimeoutExpired:
            # gdb itself wedged (seen once on a loaded machine): the tool
            # failed, not the broker; say so rather than pass or fail.
            if pid_alive(pid) and "killed by seccomp" not in self.b.log():
                self.skipTest("gdb did not finish within 120 s")
            return None

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


    def test_a_childs_stderr_cannot_forge_the_parents_lines(self):
        """What a compromised child writes to its stderr reaches the log
        escaped and under its own name (in -d mode as without)."""
        pid = self.b.processes()["worker probe"]["pid"]
        # gdb prints what write returned, 19 when the call was made; without
        # that the tool failed (as once in CI under load), not the broker
        for _ in range(3):
            r = self.gdb(pid, 'print (long)write(2, "parent: forged'
                         '\\033[2J\\n", 19)')
            if r is not None and re.search(r"\$\d+ = 19\b", r.stdout):
                break
        else:
            self.skipTest("gdb could not make the worker write: %s"
                          % (r.stdout + r.stderr)[-300:] if r else "")
        self.b.wait_log(r"worker probe: parent: forged\\x1b\[2J", timeout=30)
        self.assertNotRegex(self.b.log(), r"(?m)^parent: forged")
        self.assertEqual(self.b.processes()["worker probe"]["pid"], pid)
        # a child's last words (fatal) reach the log
        self.gdb(pid, 'print (void)fatalx("last words")', "continue")
        self.b.wait_log(r"worker probe: last words", timeout=30)


def fds(pid):
    """{fd: what it points to} of a process."""
    out = {}
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            out[int(fd)] = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except FileNotFoundError:
            pass
    return out


def kinds(table):
    """How many descriptors of each kind: file paths stay as they are."""
    count = {}
    for target in table.values():
        kind = target.split(":", 1)[0] if ":[" in target else target
        count[kind] = count.get(kind, 0) + 1
    return count


@unittest.skipUnless(os.geteuid() == 0, "needs root to start as root")
class PrivilegeFactsTest(unittest.TestCase):
    """As root with `user nobody`: what each process holds, precisely."""

    def setUp(self):
        # The server's command leaves a grandchild behind: `sleep`.
        self.b = Broker('server "probe" { command "sh" "-c" '
                        '"sleep 300 & exec python3 %s" }' % NET_PROBE,
                        user="nobody")
        self.addCleanup(self.b.stop)
        self.b.start()

    def whoami(self):
        r = self.b.ctl("server", "call", "probe", "whoami", "{}")
        return json.loads(json.loads(r.stdout)["content"][0]["text"])

    def test_each_child_holds_only_its_descriptors(self):
        procs = self.b.processes()
        state = os.path.join(self.b.dir, "state") + "/"
        listeners = {t for t in fds(self.b.proc.pid).values()
                     if t.startswith("socket:")}
        # 0 and 1 are /dev/null, 2 the log (-d), 3 the channel to the
        # parent, 4 the seccomp note, then libevent's epoll and signal pipe.
        common = {"/dev/null": 2, "pipe": 4, "anon_inode": 1, "socket": 1}
        expected = {
            # + the listener and the channel to the controller
            "frontend": {"socket": 3},
            # + channels to the frontend and the worker, the database
            "controller": {"socket": 3, state + "mcpbroker.db": 1,
                           state + "mcpbroker.db-wal": 1,
                           state + "mcpbroker.db-shm": 1},
            # + the channel to the controller, the instance's stdio pipes
            "worker probe": {"socket": 2, "pipe": 7},
        }
        for name, extra in expected.items():
            pid = procs[name]["pid"]
            want = dict(common, **extra)
            # The start's /readyz request may still be closing in the
            # frontend: a moment for its socket to go.
            try:
                wait_for(lambda: kinds(fds(pid)) == want, timeout=5,
                         what=name + "'s descriptors")
            except AssertionError:
                pass
            table = fds(pid)
            self.assertEqual(kinds(table), want, "%s: %r" % (name, table))
            self.assertEqual(table[0], "/dev/null")
            self.assertEqual(table[3].split(":")[0], "socket")
            self.assertEqual(table[4].split(":")[0], "pipe")
            self.assertIn("anon_inode:[eventpoll]", table.values())
            held = {t for t in table.values() if t in listeners}
            # Only the frontend holds a listening socket (and the parent).
            if name != "frontend":
                self.assertEqual(held & listeners - {table[3]}, set(),
                                 name)

    def test_instance_is_confined_and_its_group_dies_with_it(self):
        info = self.whoami()
        pid = info["pid"]
        self.assertEqual(info["pgid"], pid)
        st = proc_status(pid)
        for key in ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"):
            self.assertEqual(st[key], "0000000000000000", key)
        self.assertEqual(st["NoNewPrivs"], "1")
        import pwd
        nobody = pwd.getpwnam("nobody")
        self.assertEqual(set(st["Uid"].split()), {str(nobody.pw_uid)})
        self.assertEqual(set(st["Gid"].split()), {str(nobody.pw_gid)})
        self.assertEqual(kinds(fds(pid)), {"pipe": 3}, fds(pid))
        group = [int(p) for p in os.listdir("/proc") if p.isdigit() and
                 os.path.exists("/proc/%s/stat" % p) and
                 self.pgid(int(p)) == pid]
        self.assertGreaterEqual(len(group), 2, "the sleep is in the group")
        # The worker dies: the parent ends the instance's whole group.
        os.kill(self.b.processes()["worker probe"]["pid"], signal.SIGKILL)
        wait_for(lambda: not any(pid_alive(p) for p in group), timeout=15,
                 what="every process of the instance's group to be gone")

    @staticmethod
    def pgid(pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                return int(f.read().rsplit(")", 1)[1].split()[2])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return None


@unittest.skipUnless(os.geteuid() == 0, "needs root to switch users")
class InstanceUserTest(unittest.TestCase):
    """Server instances as a user of their own: not the owner of the state
    directory, so a server cannot open the database or signal the
    children."""

    def broker(self, extra):
        b = Broker('%sserver "probe" { command "python3" "%s" }'
                   % (extra, NET_PROBE), user="nobody")
        self.addCleanup(b.stop)
        return b

    def test_instances_run_as_instance_user(self):
        import pwd
        daemon = pwd.getpwnam("daemon")
        b = self.broker('instance-user "daemon"\n')
        b.start()
        r = b.ctl("server", "call", "probe", "whoami", "{}")
        info = json.loads(json.loads(r.stdout)["content"][0]["text"])
        self.assertEqual((info["uid"], info["euid"], info["gid"]),
                         (daemon.pw_uid, daemon.pw_uid, daemon.pw_gid))
        self.assertEqual(info["groups"], [daemon.pw_gid])
        state = os.stat(os.path.join(b.dir, "state"))
        self.assertNotEqual(state.st_uid, daemon.pw_uid)
        self.assertNotIn("server instances run as", b.log())

    def test_without_it_the_start_says_so(self):
        b = self.broker("")
        b.start()
        b.wait_log(r'server instances run as "nobody", the owner of the '
                   r'state directory: a server could read and change the '
                   r'database; set instance-user')

    def test_said_only_when_there_are_instances(self):
        """No server the broker starts, nothing to warn of; a reload that
        adds one says it."""
        b = Broker("", user="nobody")
        self.addCleanup(b.stop)
        b.start()
        b.write_config('server "probe" { command "python3" "%s" }'
                       % NET_PROBE)
        b.signal(signal.SIGHUP)
        b.wait_log(r"configuration reloaded")
        log = b.log()
        said = 'server instances run as "nobody", the owner of the state'
        self.assertEqual(log.count(said), 1, log)
        self.assertGreater(log.index(said), log.index("reloading "
                                                      "configuration"))

    def test_the_childrens_user_or_root_is_refused(self):
        for name, why in (("nobody", "the children's user"),
                          ("root", "root")):
            b = self.broker('instance-user "%s"\n' % name)
            with self.assertRaises(AssertionError):
                b.start()
            self.assertNotEqual(b.wait_exit(), 0)
            self.assertIn('instance-user "%s" is %s; server instances need '
                          'a user and group of their own' % (name, why),
                          b.log())


if __name__ == "__main__":
    unittest.main()
