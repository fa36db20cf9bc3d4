"""Workers in the running daemon: stdio server instances spawned by the
parent, their sandbox, isolation per user, failures reported precisely."""
import json
import os
import pwd
import signal
import socket
import unittest

from broker import Broker, pid_alive, proc_status, wait_for
from mcpfixtures import EVERYTHING, HOSTILE, NET_PROBE, node


def q(s):
    return '"%s"' % s


class WorkerTest(unittest.TestCase):
    def broker(self, body, **kw):
        b = Broker(body, **kw)
        self.addCleanup(b.stop)
        return b.start()

    def call(self, b, server, tool, args="{}", user=None, check=True):
        extra = ["-u", user] if user else []
        r = b.ctl("server", "call", *extra, server, tool, args, check=False)
        if check:
            self.assertEqual(r.returncode, 0, r.stderr)
            return json.loads(r.stdout)
        return r

    def probe(self, b, server, tool, args="{}", user=None):
        res = self.call(b, server, tool, args, user=user)
        return json.loads(res["content"][0]["text"])

    def test_ready_with_tools_and_calls_work(self):
        b = self.broker('server "every" { command %s %s "stdio" }'
                        % (q(node()), q(EVERYTHING)))
        status, doc = b.get("/readyz")
        self.assertEqual(status, 200)
        self.assertEqual(doc["servers"][0]["state"], "ready")
        self.assertGreaterEqual(doc["servers"][0]["tools"], 10)
        tools = json.loads(b.ctl("server", "tools", "every").stdout)
        self.assertIn("echo", [t["name"] for t in tools])
        res = self.call(b, "every", "echo", '{"message":"through the '
                        'daemon"}')
        self.assertEqual(res["content"][0]["text"], "Echo: through the "
                         "daemon")

    def test_instance_sandbox(self):
        b = self.broker('server "probe" { command "python3" %s }'
                        % q(NET_PROBE))
        info = self.probe(b, "probe", "whoami")
        pid = info["pid"]
        self.assertEqual(info["pgid"], pid)      # own process group
        self.assertEqual(info["sid"], pid)       # own session
        st = proc_status(pid)
        self.assertEqual(st["CapEff"], "0000000000000000")
        self.assertEqual(st["CapPrm"], "0000000000000000")
        self.assertEqual(st["NoNewPrivs"], "1")
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody").pw_uid
            self.assertEqual(set(st["Uid"].split()), {str(nobody)})
            self.assertEqual(st["CapBnd"], "0000000000000000")
        # What exec gave it (Python itself may add LC_CTYPE afterwards).
        with open("/proc/%d/environ" % pid, "rb") as f:
            keys = {kv.split(b"=", 1)[0].decode()
                    for kv in f.read().split(b"\0") if kv}
        self.assertEqual(keys, {"HOME", "LOGNAME", "PATH", "SHELL", "TERM",
                                "USER"})
        # The worker itself is sandboxed and is not the instance's parent.
        worker = b.processes()["worker probe"]["pid"]
        self.assertEqual(proc_status(worker)["Seccomp"], "2")
        self.assertNotEqual(int(proc_status(pid)["PPid"]), worker)

    def test_env_passes_only_what_the_config_names(self):
        os.environ["MCPBROKER_T_PASS"] = "passed"
        os.environ["MCPBROKER_T_SECRET"] = "sk-not-for-servers"
        self.addCleanup(os.environ.pop, "MCPBROKER_T_PASS")
        self.addCleanup(os.environ.pop, "MCPBROKER_T_SECRET")
        b = self.broker('server "probe" { command "python3" %s '
                        'env "MCPBROKER_T_PASS" }' % q(NET_PROBE))
        info = self.probe(b, "probe", "whoami")
        self.assertIn("MCPBROKER_T_PASS", info["env_keys"])
        self.assertNotIn("MCPBROKER_T_SECRET", info["env_keys"])
        with open("/proc/%d/environ" % info["pid"], "rb") as f:
            self.assertNotIn(b"sk-not-for-servers", f.read())

    def test_network_none_blocks_tcp(self):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self.addCleanup(listener.close)
        port = listener.getsockname()[1]
        b = self.broker('server "open" { command "python3" %s }\n'
                        'server "closed" { command "python3" %s '
                        'network none }' % (q(NET_PROBE), q(NET_PROBE)))
        args = '{"host":"127.0.0.1","port":%d}' % port
        res = self.call(b, "open", "connect", args)
        self.assertEqual(res["content"][0]["text"], "connected")
        res = self.call(b, "closed", "connect", args)
        self.assertTrue(res["content"][0]["text"].startswith("error"),
                        res)

    def test_per_user_isolation(self):
        b = self.broker('server "probe" { command "python3" %s '
                        'isolation per-user }' % q(NET_PROBE))
        alice1 = self.probe(b, "probe", "whoami", user="alice")["pid"]
        alice2 = self.probe(b, "probe", "whoami", user="alice")["pid"]
        bob = self.probe(b, "probe", "whoami", user="bob")["pid"]
        self.assertEqual(alice1, alice2)
        self.assertNotEqual(alice1, bob)
        worker = b.processes()["worker probe"]["pid"]
        r = self.call(b, "probe", "whoami", check=False)   # no user given
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("keeps an instance per user", r.stderr)
        self.assertEqual(b.processes()["worker probe"]["pid"], worker)

    def test_server_exit_mid_call_is_reported_and_recovers(self):
        b = self.broker('server "bad" { command "python3" %s '
                        '"exit-mid-call" }' % q(HOSTILE))
        r = self.call(b, "bad", "echo", '{"text":"x"}', check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn('server "bad" exited with status 3', r.stderr)
        b.wait_log(r"server bad: .*exited with status 3; retrying in")
        wait_for(lambda: b.get("/readyz")[0] == 200, timeout=15,
                 what="the server back after its exit")

    def test_command_not_found_is_down_with_the_reason(self):
        b = Broker('server "gone" { command "/nonexistent/srv" }')
        self.addCleanup(b.stop)
        b.start(wait_ready=False)
        status, doc = wait_for(lambda: (lambda r: r if r[0] == 503 and
                               r[1]["servers"][0]["state"] == "down" and
                               "error" in r[1]["servers"][0] else None)(
                               b.get("/readyz")), what="down state")
        self.assertIn('cannot execute "/nonexistent/srv"',
                      doc["servers"][0]["error"])

    def test_silent_server_is_down_with_the_reason(self):
        """A server that never answers the handshake: down, and /readyz
        says why, after connect-timeout."""
        b = Broker('server "mute" { command "python3" %s "silent" '
                   'connect-timeout 1s }' % q(HOSTILE))
        self.addCleanup(b.stop)
        b.start(wait_ready=False)
        status, doc = wait_for(lambda: (lambda r: r if r[0] == 503 and
                               r[1]["servers"][0]["state"] == "down" and
                               "error" in r[1]["servers"][0] else None)(
                               b.get("/readyz")), timeout=15,
                               what="down state")
        self.assertEqual(doc["servers"][0]["error"],
                         "no MCP handshake within 1000 ms")

    def test_killed_instance_is_replaced(self):
        b = self.broker('server "probe" { command "python3" %s }'
                        % q(NET_PROBE))
        first = self.probe(b, "probe", "whoami")["pid"]
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: not pid_alive(first))
        b.wait_log(r"server probe: .*killed by signal 9")
        wait_for(lambda: b.get("/readyz")[0] == 200, timeout=15)
        second = self.probe(b, "probe", "whoami")["pid"]
        self.assertNotEqual(first, second)

    def test_instances_die_with_the_daemon(self):
        b = self.broker('server "probe" { command "python3" %s }'
                        % q(NET_PROBE))
        pid = self.probe(b, "probe", "whoami")["pid"]
        b.signal(signal.SIGTERM)
        self.assertEqual(b.wait_exit(timeout=15), 0)
        wait_for(lambda: not pid_alive(pid), timeout=5,
                 what="instance gone")



class HttpWorkerTest(unittest.TestCase):
    """url servers: the worker has no socket(); the parent connects."""

    def test_all_http_transports_through_the_daemon(self):
        from mcpfixtures import everything_http, v2_http
        servers = [everything_http("streamableHttp"), everything_http("sse"),
                   v2_http()]
        for s in servers:
            self.addCleanup(s.stop)
        b = Broker('server "sh" { url "http://127.0.0.1:%d/mcp" }\n'
                   'server "ss" { url "http://localhost:%d/sse" '
                   'transport sse }\n'
                   'server "v2" { url "http://127.0.0.1:%d/mcp" }'
                   % tuple(s.port for s in servers))
        self.addCleanup(b.stop)
        b.start()
        doc = b.get("/readyz")[1]
        tools = {s["name"]: s["tools"] for s in doc["servers"]}
        self.assertGreaterEqual(tools["sh"], 10)
        self.assertGreaterEqual(tools["ss"], 10)
        self.assertGreaterEqual(tools["v2"], 39)
        for server in ("sh", "ss"):
            r = b.ctl("server", "call", server, "echo",
                      '{"message":"via %s"}' % server)
            self.assertIn("Echo: via %s" % server, r.stdout)
        r = b.ctl("server", "call", "v2", "add", '{"a":40,"b":2}')
        self.assertEqual(json.loads(r.stdout)["structuredContent"],
                         {"sum": 42})
        self.assertEqual(proc_status(b.processes()["worker sh"]["pid"])[
            "Seccomp"], "2")

    def test_server_going_away_and_coming_back(self):
        from mcpfixtures import v2_http, HttpServer, v2_cmd
        server = v2_http()
        port = server.port
        b = Broker('server "v2" { url "http://127.0.0.1:%d/mcp" '
                   'call-timeout 5s }' % port)
        self.addCleanup(b.stop)
        b.start()
        server.stop()
        r = b.ctl("server", "call", "v2", "echo", '{"text":"x"}',
                  check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("Connection refused", r.stderr)
        again = HttpServer(v2_cmd("http", str(port), "127.0.0.1"), port)
        self.addCleanup(again.stop)
        r = b.ctl("server", "call", "v2", "echo", '{"text":"back"}')
        self.assertIn("back", r.stdout)


class ListChangedTest(unittest.TestCase):
    """A changed tool list reaches the controller (subscriptions/listen on
    2026-07-28 servers)."""

    def tool_count(self, b):
        return b.get("/readyz")[1]["servers"][0].get("tools")

    def check(self, body):
        b = Broker(body)
        self.addCleanup(b.stop)
        b.start()
        before = self.tool_count(b)
        b.ctl("server", "call", "v2", "change_tools", "{}")
        wait_for(lambda: self.tool_count(b) == before + 1, timeout=10,
                 what="one more tool")

    def test_stdio(self):
        from mcpfixtures import V2_SERVER
        self.check('server "v2" { command %s %s "stdio" }'
                   % (q(node()), q(V2_SERVER)))

    def test_http(self):
        from mcpfixtures import v2_http
        server = v2_http()
        self.addCleanup(server.stop)
        self.check('server "v2" { url "http://127.0.0.1:%d/mcp" }'
                   % server.port)


class LandlockTest(unittest.TestCase):
    def test_filesystem_rules_confine_the_server(self):
        import shutil
        import tempfile
        from mcpfixtures import FILESYSTEM, TESTS
        top = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, top)
        os.chmod(top, 0o755)
        dirs = {}
        for name in ("allowed", "hidden"):
            d = os.path.join(top, name)
            os.mkdir(d, 0o755)
            with open(os.path.join(d, name + ".txt"), "w") as f:
                f.write("content of %s\n" % name)
            os.chmod(os.path.join(d, name + ".txt"), 0o644)
            dirs[name] = d
        # server-filesystem itself would serve both directories; Landlock
        # lets it read only the one the config names (and its own code).
        b = Broker('server "fs" { command %s %s %s %s\n'
                   '  filesystem read %s\n  filesystem read %s }'
                   % (q(node()), q(FILESYSTEM), q(dirs["allowed"]),
                      q(dirs["hidden"]), q(dirs["allowed"]),
                      q(os.path.join(TESTS, "node_modules"))))
        self.addCleanup(b.stop)
        b.start()
        r = b.ctl("server", "call", "fs", "read_file",
                  '{"path":"%s/allowed.txt"}' % dirs["allowed"])
        self.assertIn("content of allowed", r.stdout)
        r = b.ctl("server", "call", "fs", "read_file",
                  '{"path":"%s/hidden.txt"}' % dirs["hidden"], check=False)
        self.assertNotIn("content of hidden", r.stdout + r.stderr)
        self.assertTrue(r.returncode != 0 or json.loads(r.stdout)["isError"])


class InstanceLifecycleTest(unittest.TestCase):
    def test_idle_instances_are_reaped_and_capped(self):
        b = Broker('server "probe" { command "python3" %s '
                   'isolation per-user idle-timeout 1s max-instances 1 }'
                   % q(NET_PROBE))
        self.addCleanup(b.stop)
        b.start()

        def whoami(user):
            r = b.ctl("server", "call", "-u", user, "probe", "whoami", "{}",
                      check=False)
            return r

        r = whoami("alice")
        self.assertEqual(r.returncode, 0, r.stderr)
        alice = json.loads(json.loads(r.stdout)["content"][0]["text"])["pid"]
        r = whoami("bob")
        self.assertEqual(r.returncode, 1)
        self.assertIn("instance limit (1) reached", r.stderr)
        # Idle for longer than idle-timeout: alice's instance goes.
        wait_for(lambda: not pid_alive(alice), timeout=20,
                 what="idle instance reaped")
        r = whoami("bob")
        self.assertEqual(r.returncode, 0, r.stderr)


class ReleaseTest(unittest.TestCase):
    def test_ending_a_chat_session_stops_its_instance(self):
        b = Broker('server "probe" { command "python3" %s '
                   'isolation per-user }\n'
                   'provider "llm" { type ollama base-url '
                   '"http://127.0.0.1:1" model "m" }' % q(NET_PROBE))
        self.addCleanup(b.stop)
        b.start()
        r = b.ctl("server", "call", "-u", "dev", "probe", "whoami", "{}")
        pid = json.loads(json.loads(r.stdout)["content"][0]["text"])["pid"]
        for path in ("/llmchat/connect", "/llmchat/disconnect"):
            status, _, _ = b.request("POST", path, '{"provider":"llm"}')
            self.assertEqual(status, 200)
        wait_for(lambda: not pid_alive(pid), timeout=10,
                 what="the user's instance stopped")


if __name__ == "__main__":
    unittest.main()
