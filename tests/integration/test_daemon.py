"""The privilege-separated daemon end to end: processes, supervision,
reload, limits, the control socket and the sandbox, on the real binary."""
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import unittest

from broker import (MCPBROKER, MCPBROKERCTL, Broker, pid_alive, proc_status,
                    wait_for)

OK_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "..", "fixtures", "hostile_mcp_server.py")
TWO_SERVERS = """
server "files" { command "python3" "%s" "ok" }
server "notes" { command "python3" "%s" "ok" }
""" % (OK_SERVER, OK_SERVER)


class DaemonTest(unittest.TestCase):
    def broker(self, body=TWO_SERVERS, wait_ready=True, **kw):
        b = Broker(body, **kw)
        self.addCleanup(b.stop)
        return b.start(wait_ready=wait_ready)

    def test_healthz_and_readyz(self):
        b = self.broker()
        status, doc = b.get("/healthz")
        self.assertEqual(status, 200)
        self.assertEqual(doc, {"status": "ok"})
        status, doc = b.get("/readyz")
        self.assertEqual(status, 200)
        self.assertEqual(doc["status"], "ready")
        self.assertEqual(sorted(s["name"] for s in doc["servers"]),
                         ["files", "notes"])
        self.assertTrue(all(s["state"] == "ready" for s in doc["servers"]))

    def test_unknown_path_and_method_get_json_errors(self):
        b = self.broker()
        status, doc = b.get("/nope")
        self.assertEqual(status, 404)
        self.assertEqual(doc["error"]["code"], "not_found")
        status, headers, data = b.request("POST", "/healthz", body=b"{}")
        self.assertEqual(status, 405)
        self.assertEqual(headers.get("Content-Type"), "application/json")

    def test_body_over_max_body_is_refused(self):
        b = self.broker("limits { max-body 1K }")
        status, _, _ = b.request("POST", "/healthz", body=b"x" * 4096)
        self.assertEqual(status, 413)
        status, _ = b.get("/healthz")
        self.assertEqual(status, 200)

    def test_slow_headers_are_cut_off(self):
        b = self.broker("limits { header-timeout 1s }")
        slow = socket.create_connection(("127.0.0.1", b.port))
        self.addCleanup(slow.close)
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        # Another client is served while the slow one dawdles.
        self.assertEqual(b.get("/healthz")[0], 200)
        slow.settimeout(10)
        start = time.monotonic()
        data = slow.recv(4096)
        while data:
            data = slow.recv(4096)
        self.assertLess(time.monotonic() - start, 8)

    def test_worker_killed_comes_back(self):
        b = self.broker()
        before = b.processes()["worker files"]
        os.kill(before["pid"], signal.SIGKILL)
        b.wait_log(r"worker files \(pid %d\) killed by signal 9 .*"
                   r"restarting in 1000 ms" % before["pid"])
        status, doc = b.get("/readyz")
        if status == 503:   # may already be back; if not, it says who
            down = [s for s in doc["servers"] if s["state"] != "ready"]
            self.assertEqual([s["name"] for s in down], ["files"])
        wait_for(lambda: b.get("/readyz")[0] == 200, timeout=5,
                 what="readiness after restart")
        after = b.processes()["worker files"]
        self.assertNotEqual(after["pid"], before["pid"])
        self.assertEqual(after["restarts"], 1)
        trail = b.ctl("audit", "show", "-k", "system").stdout
        self.assertIn("worker_down", trail)
        self.assertIn("killed by signal 9", trail)
        self.assertEqual(after["state"], "running")
        self.assertFalse(pid_alive(before["pid"]))

    def test_repeated_worker_deaths_back_off(self):
        b = self.broker()
        for delay in (1000, 2000):
            pid = b.processes()["worker notes"]["pid"]
            os.kill(pid, signal.SIGKILL)
            b.wait_log(r"worker notes \(pid %d\) .* restarting in %d ms"
                       % (pid, delay))
            wait_for(lambda: b.processes()["worker notes"]["state"] ==
                     "running" and b.processes()["worker notes"]["pid"] != pid,
                     timeout=delay / 1000 + 5, what="restart")

    def test_controller_death_stops_everything(self):
        b = self.broker()
        procs = b.processes()
        pids = [p["pid"] for n, p in procs.items() if n != "parent"]
        os.kill(procs["controller"]["pid"], signal.SIGKILL)
        code = b.wait_exit(timeout=15)
        self.assertNotEqual(code, 0)
        for pid in pids:
            wait_for(lambda: not pid_alive(pid), timeout=5,
                     what="pid %d gone" % pid)
        self.assertIn("controller", b.log())
        self.assertRegex(b.log(), r"controller \(pid \d+\) killed by signal 9")

    def test_frontend_death_stops_everything(self):
        b = self.broker()
        procs = b.processes()
        os.kill(procs["frontend"]["pid"], signal.SIGKILL)
        self.assertNotEqual(b.wait_exit(timeout=15), 0)
        for n, p in procs.items():
            if n != "parent":
                wait_for(lambda: not pid_alive(p["pid"]), timeout=5)

    def test_sigterm_is_orderly(self):
        b = self.broker()
        pids = b.child_pids()
        start = time.monotonic()
        b.signal(signal.SIGTERM)
        self.assertEqual(b.wait_exit(timeout=10), 0)
        self.assertLess(time.monotonic() - start, 6)
        for pid in pids:
            self.assertFalse(pid_alive(pid))
        self.assertFalse(os.path.exists(b.sock))

    def test_sighup_with_broken_config_keeps_serving(self):
        """A reload is refused for what -n refuses: a syntax error, a
        control character in a configured header (raw or escaped), an
        address of cloud metadata; the running configuration stays."""
        b = self.broker()
        pids = b.processes()
        cases = [
            ('server "broken" {\n  bogus-keyword\n', r"bogus-keyword"),
            ('server "h" { url "http://127.0.0.1:1/mcp" header "X-A" '
             '"a\rX-Injected: yes" }\n', r"control character 0x0d"),
            ('server "h" { url "http://127.0.0.1:1/mcp" header "X-A" '
             '"a\\nX-Injected: yes" }\n',
             r'header "X-A": value contains a control character'),
            ('server "h" { url "http://169.254.169.254/mcp" }\n',
             r'server "h": url .* is .*allow-address'),
        ]
        for n, (extra, why) in enumerate(cases, 1):
            b.write_config(None, raw=b.config_text(TWO_SERVERS) + extra)
            b.signal(signal.SIGHUP)
            b.wait_log(r"mcpbroker.conf:\d+: .*" + why)
            wait_for(lambda: b.log().count("reload failed; keeping the "
                                           "running configuration") == n,
                     what="reload %d refused" % n)
            self.assertEqual(b.get("/healthz")[0], 200)
            self.assertEqual(b.get("/readyz")[0], 200)
            self.assertEqual(b.processes(), pids)

    def test_sighup_applies_a_good_config(self):
        b = self.broker()
        old = b.processes()
        b.write_config(TWO_SERVERS.replace('"notes"', '"wiki"'))
        b.signal(signal.SIGHUP)
        b.wait_log(r"configuration reloaded")
        wait_for(lambda: "config_reloaded" in b.ctl(
            "audit", "show", "-k", "system").stdout, what="reload audited")
        wait_for(lambda: "worker wiki" in b.processes() and
                 "worker notes" not in b.processes(), what="new worker set")
        wait_for(lambda: b.get("/readyz")[0] == 200, what="ready")
        names = [s["name"] for s in b.get("/readyz")[1]["servers"]]
        self.assertEqual(sorted(names), ["files", "wiki"])
        wait_for(lambda: not pid_alive(old["worker notes"]["pid"]))
        self.assertEqual(b.processes()["worker files"]["pid"],
                         old["worker files"]["pid"])
        self.assertEqual(b.processes()["controller"]["pid"],
                         old["controller"]["pid"])

    def test_reload_restarts_a_worker_whose_secret_changed(self):
        token = os.path.join(tempfile.mkdtemp(), "jira.token")
        self.addCleanup(shutil.rmtree, os.path.dirname(token))
        with open(token, "w") as f:
            f.write("first-token\n")
        body = TWO_SERVERS + ('server "jira" { url "https://127.0.0.1:1/mcp" '
                              'bearer-token-file "%s" }' % token)
        b = self.broker(body, wait_ready=False)
        before = b.processes()
        b.ctl("reload")
        self.assertEqual(b.processes()["worker jira"]["pid"],
                         before["worker jira"]["pid"])
        with open(token, "w") as f:
            f.write("second-token\n")
        b.ctl("reload")
        wait_for(lambda: b.processes()["worker jira"]["pid"] !=
                 before["worker jira"]["pid"], what="jira worker respawned")
        self.assertEqual(b.processes()["worker files"]["pid"],
                         before["worker files"]["pid"])
        self.assertNotIn("second-token", b.log())
        self.assertNotIn("first-token", b.log())

    def test_reload_that_needs_a_restart_is_refused(self):
        b = self.broker()
        b.write_config(None, raw=b.config_text(TWO_SERVERS).replace(
            "port %d" % b.port, "port %d" % (b.port + 1)))
        r = b.ctl("reload", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("listen", r.stderr)
        self.assertEqual(b.get("/healthz")[0], 200)

    def test_ctl_status_and_socket_mode(self):
        b = self.broker()
        procs = b.processes()
        self.assertEqual(sorted(procs), ["controller", "frontend", "parent",
                                         "worker files", "worker notes"])
        for name, p in procs.items():
            self.assertEqual(p["state"], "running", name)
            self.assertTrue(pid_alive(p["pid"]), name)
            self.assertEqual(p["restarts"], 0)
        self.assertEqual(procs["parent"]["pid"], b.proc.pid)
        mode = stat.S_IMODE(os.stat(b.sock).st_mode)
        self.assertEqual(mode, 0o600)

    @unittest.skipUnless(os.geteuid() == 0, "another uid needs root")
    def test_control_socket_checks_the_peers_uid(self):
        """The socket's mode is one wall; SO_PEERCRED is the other."""
        b = self.broker()
        os.chmod(b.sock, 0o666)

        def as_nobody():
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        r = subprocess.run([MCPBROKERCTL, "-s", b.sock, "status"],
                           capture_output=True, text=True, timeout=30,
                           preexec_fn=as_nobody)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertNotIn("controller", r.stdout)
        b.wait_log(r"control connection refused")
        self.assertIn("controller", b.ctl("status").stdout)

    def test_state_dir_is_the_childrens_only(self):
        b = self.broker()
        state = os.path.join(b.dir, "state")
        self.assertEqual(stat.S_IMODE(os.stat(state).st_mode), 0o750)
        # one an administrator made open to all is closed
        b = Broker(TWO_SERVERS)
        self.addCleanup(b.stop)
        state = os.path.join(b.dir, "state")
        os.mkdir(state)
        os.chmod(state, 0o777)
        b.start()
        self.assertEqual(stat.S_IMODE(os.stat(state).st_mode), 0o750)
        b.wait_log(r'state-dir ".*": mode 0777 made 0750')

    def test_second_instance_refuses_the_control_socket(self):
        b = self.broker()
        r = subprocess.run([MCPBROKER, "-d", "-f", b.conf],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 1)
        # Either the port or the control socket is found busy first.
        self.assertRegex(r.stderr, r"(Address already in use|already "
                                   r"running)")
        self.assertEqual(b.get("/healthz")[0], 200)

    def test_every_child_is_sandboxed(self):
        # A core limit to inherit, so that the daemon's own 0 shows.
        import resource
        old = resource.getrlimit(resource.RLIMIT_CORE)
        if old[1] != 0:
            resource.setrlimit(resource.RLIMIT_CORE, (old[1], old[1]))
        self.addCleanup(resource.setrlimit, resource.RLIMIT_CORE, old)
        b = self.broker()
        for pid in b.child_pids():
            st = proc_status(pid)
            self.assertEqual(st["CapEff"], "0000000000000000", pid)
            self.assertEqual(st["CapPrm"], "0000000000000000", pid)
            self.assertEqual(st["NoNewPrivs"], "1", pid)
            self.assertEqual(st["Seccomp"], "2", pid)
            # Not dumpable: the kernel gives its /proc files to root, so
            # the children's own uid (or another process of it) cannot
            # read its memory or ptrace it.
            self.assertNotEqual(int(st["Uid"].split()[0]), 0, pid)
            self.assertEqual(os.stat("/proc/%d/environ" % pid).st_uid, 0,
                             pid)
        for pid in [b.proc.pid] + b.child_pids():
            with open("/proc/%d/limits" % pid) as f:
                core = [line.split()[4:6] for line in f
                        if line.startswith("Max core file size")]
            self.assertEqual(core, [["0", "0"]], pid)

    @unittest.skipUnless(os.geteuid() == 0, "reading a non-dumpable "
                         "process's environment needs root")
    def test_children_get_none_of_the_parents_environment(self):
        """A key given with api-key-env is the parent's to read: the
        frontend and the workers must not hold it, nor anything else of
        the environment but the CA file and sanitizer options."""
        os.environ["MCPBROKER_TEST_SECRET"] = "s3cret"
        self.addCleanup(os.environ.pop, "MCPBROKER_TEST_SECRET")
        b = self.broker(TWO_SERVERS + 'provider "p" { type openai '
                        'base-url "http://127.0.0.1:1/v1" model "m" '
                        'api-key-env "MCPBROKER_TEST_SECRET" }\n')
        kept = {"SSL_CERT_FILE", "SSL_CERT_DIR", "ASAN_OPTIONS",
                "UBSAN_OPTIONS", "LSAN_OPTIONS"}
        for pid in b.child_pids():
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read()
            self.assertNotIn(b"s3cret", env, pid)
            names = {e.split(b"=", 1)[0].decode() for e in env.split(b"\0")
                     if e}
            self.assertLessEqual(names, kept, pid)

    @unittest.skipUnless(os.geteuid() == 0 and shutil.which("unshare"),
                         "a pid namespace needs root and unshare")
    def test_pid_1_in_a_container(self):
        """The daemon as a container's entrypoint: its children's parent
        is pid 1, which does not mean the parent died."""
        b = Broker(TWO_SERVERS, wrap=["unshare", "--pid", "--fork",
                                      "--kill-child=SIGTERM"])
        self.addCleanup(b.stop)
        b.start()
        self.assertEqual(b.processes()["parent"]["pid"], 1)
        self.assertEqual(b.get("/readyz")[0], 200)

    @unittest.skipUnless(os.geteuid() == 0, "needs root")
    def test_as_root_children_run_as_nobody_without_privileges(self):
        b = self.broker(user="nobody")
        import pwd
        nobody = pwd.getpwnam("nobody")
        pids = b.child_pids()
        self.assertEqual(len(pids), 4)
        for pid in pids:
            st = proc_status(pid)
            uids = st["Uid"].split()
            gids = st["Gid"].split()
            self.assertEqual(set(uids), {str(nobody.pw_uid)}, pid)
            self.assertEqual(set(gids), {str(nobody.pw_gid)}, pid)
            self.assertEqual(st["CapEff"], "0000000000000000", pid)
            self.assertEqual(st["CapPrm"], "0000000000000000", pid)
            self.assertEqual(st["CapBnd"], "0000000000000000", pid)
            self.assertEqual(st["NoNewPrivs"], "1", pid)
            self.assertEqual(st["Seccomp"], "2", pid)
        self.assertEqual(proc_status(b.proc.pid)["Uid"].split()[0], "0")
        state = os.stat(os.path.join(b.dir, "state"))
        self.assertEqual(state.st_uid, nobody.pw_uid)


class LogFormatTest(unittest.TestCase):
    def test_json_lines_from_every_process(self):
        b = Broker(TWO_SERVERS + "log-format json\n")
        self.addCleanup(b.stop)
        b.start()
        b.ctl("reload")
        b.wait_log(r'"msg":"configuration reloaded')
        lines = [l for l in b.log().splitlines() if l.strip()]
        procs = set()
        for line in lines:
            doc = json.loads(line)      # every line, children's included
            self.assertEqual(sorted(doc), ["level", "msg", "proc", "time"])
            self.assertRegex(doc["time"],
                             r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertIn(doc["level"], ("debug", "info", "notice",
                                         "warning", "error", "critical"))
            procs.add(doc["proc"])
        self.assertTrue({"parent", "frontend", "controller",
                         "worker files"} <= procs, procs)


class CheckModeTest(unittest.TestCase):
    def test_good_config(self):
        b = Broker(TWO_SERVERS)
        self.addCleanup(b.stop)
        r = subprocess.run([MCPBROKER, "-n", "-f", b.conf],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = subprocess.run([MCPBROKER, "-n", "-v", "-f", b.conf],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('server "files"', r.stdout)
        self.assertIn('listen on 127.0.0.1 port %d' % b.port, r.stdout)

    def test_errors_name_file_and_line(self):
        b = Broker(TWO_SERVERS + "\nfrobnicate yes\n")
        self.addCleanup(b.stop)
        r = subprocess.run([MCPBROKER, "-n", "-f", b.conf],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"%s:\d+: .*frobnicate" % b.conf)

    def test_missing_listen(self):
        b = Broker()
        b.write_config(None, raw='state-dir "%s/state"\n' % b.dir)
        self.addCleanup(b.stop)
        r = subprocess.run([MCPBROKER, "-n", "-f", b.conf],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no \"listen on\" statement", r.stderr)

    def test_secret_env_never_printed(self):
        b = Broker('provider "o" { type openai api-key-env "T_KEY" '
                   'model "m" }')
        self.addCleanup(b.stop)
        env = dict(os.environ, T_KEY="sk-very-secret-value")
        r = subprocess.run([MCPBROKER, "-n", "-v", "-f", b.conf],
                           capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("sk-very-secret-value", r.stdout + r.stderr)
        self.assertIn("(env T_KEY)", r.stdout)


if __name__ == "__main__":
    unittest.main()
