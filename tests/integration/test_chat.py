"""Conversations end to end: the real daemon, the fake LLM speaking each
provider's wire format, and server-filesystem over stdio."""
import http.client
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import unittest

from broker import Broker, free_port, wait_for
from llmfixtures import KEY, PROVIDERS, FakeLLM, sse_events
from mcpfixtures import FILESYSTEM, node

SECRET_TEXT = "The vault code is 4-8-15-16-23-42."
SYSTEM_PROMPT = "You guard the vault and answer briefly."


class ChatBase(unittest.TestCase):
    provider = "openai"
    limits = ""

    @classmethod
    def setUpClass(cls):
        cls.llm = FakeLLM()
        cls.dir = tempfile.mkdtemp()
        os.chmod(cls.dir, 0o755)
        cls.file = os.path.join(cls.dir, "note.txt")
        with open(cls.file, "w") as f:
            f.write(SECRET_TEXT + "\n")
        os.chmod(cls.file, 0o644)
        cls.big = os.path.join(cls.dir, "big.txt")
        with open(cls.big, "w") as f:
            f.write("A" * 5000)
        os.chmod(cls.big, 0o644)
        os.environ["FAKE_LLM_KEY"] = KEY
        cls.b = Broker('provider "llm" { %s system-prompt "%s" }\n'
                       'provider "down" { type ollama base-url '
                       '"http://127.0.0.1:%d" model "m" }\n'
                       'server "files" { command "%s" "%s" "%s" }\n'
                       '%s\nallow tool "*"\n'
                       % (PROVIDERS[cls.provider] % cls.llm.port,
                          SYSTEM_PROMPT, free_port(), node(), FILESYSTEM,
                          cls.dir,
                          cls.limits))
        cls.b.start()

    @classmethod
    def tearDownClass(cls):
        cls.b.stop()
        cls.llm.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        self.llm.reset()
        status, doc = self.post("/llmchat/connect", {"provider": "llm"})
        self.assertEqual(status, 200, doc)

    def post(self, path, body):
        status, _, data = self.b.request("POST", path, json.dumps(body),
                                         {"Content-Type":
                                          "application/json"})
        return status, json.loads(data) if data else None

    def chat(self, message, **kw):
        return sse_events(self.b.port, "/llmchat/chat",
                          dict({"message": message}, **kw))

    def read_file_step(self):
        return {"tool_calls": [{"name": "files__read_file",
                                "arguments": {"path": self.file}}]}

    def stream(self, answer):
        """A streaming chat; answer(event_data) is called on approval."""
        conn = http.client.HTTPConnection("127.0.0.1", self.b.port,
                                          timeout=30)
        conn.request("POST", "/llmchat/chat",
                     json.dumps({"message": "read it"}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        events, event = [], None
        while True:
            line = r.readline().decode()
            if not line:
                break
            line = line.rstrip("\r\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data = json.loads(line[5:])
                events.append((event, data))
                if event == "approval_required" and answer is not None:
                    answer(data)
        conn.close()
        return events

    def approve(self, data, **kw):
        return self.post("/llmchat/approve", dict({"id": data["id"]}, **kw))


class ChatFlowTest(ChatBase):
    def test_connect_lists_the_tools(self):
        status, doc = self.post("/llmchat/connect", {"provider": "llm"})
        self.assertEqual(status, 200)
        self.assertEqual(doc["status"], "connected")
        self.assertGreater(doc["tool_count"], 5)
        names = [t["name"] for t in doc["tools"]]
        self.assertIn("files__read_file", names)

    def test_tool_call_then_answer_streams_in_order(self):
        self.llm.script(self.read_file_step(), {"echo_tool_result": True})
        status, events = self.chat("What is the vault code?")
        self.assertEqual(status, 200)
        names = [e for e, _ in events]
        self.assertEqual(names[0], "tool_start")
        self.assertIn("tool_end", names)
        self.assertEqual(names[-1], "final")
        start = dict(events)["tool_start"]
        end = dict(events)["tool_end"]
        self.assertEqual(start["id"], end["id"])
        self.assertEqual(start["tool"], "read_file")
        self.assertEqual(start["server"], "files")
        self.assertLess(names.index("tool_end"), names.index("token"))
        final = events[-1][1]
        self.assertIn("4-8-15-16-23-42", final["content"])
        self.assertEqual(final["tools_used"], ["files.read_file"])
        tokens = "".join(d["content"] for e, d in events if e == "token")
        self.assertEqual(tokens, final["content"])

    def test_non_streaming_answer(self):
        self.llm.script(self.read_file_step(), {"echo_tool_result": True})
        status, doc = self.chat("What is the vault code?", streaming=False)
        self.assertEqual(status, 200, doc)
        self.assertIn("4-8-15-16-23-42", doc["content"])
        self.assertEqual(doc["tools_used"], ["files.read_file"])
        self.assertEqual(len(doc["tool_invocations"]), 1)
        self.assertIn("elapsed_ms", doc)
        self.assertIn("input_tokens", doc["usage"])

    def test_two_tools_in_parallel(self):
        self.llm.script({"tool_calls": [
            {"name": "files__read_file", "arguments": {"path": self.file}},
            {"name": "files__list_directory",
             "arguments": {"path": self.dir}}]},
            {"text": "done"})
        status, events = self.chat("Read and list")
        ends = [d for e, d in events if e == "tool_end"]
        self.assertEqual(len(ends), 2)
        self.assertEqual(len({d["id"] for d in ends}), 2)
        self.assertEqual(events[-1][0], "final")

    def test_tool_error_is_fed_back(self):
        self.llm.script({"tool_calls": [
            {"name": "files__read_file",
             "arguments": {"path": self.dir + "/missing.txt"}}]},
            {"text": "That file does not exist."})
        status, events = self.chat("Read the missing file")
        names = [e for e, _ in events]
        self.assertIn("tool_error", names)
        self.assertEqual(names[-1], "final")
        # The model saw the error as a tool result.
        last = self.llm.requests()[-1]
        self.assertIn("missing.txt", json.dumps(last["body"]))

    def test_malformed_tool_arguments_go_back_to_the_model(self):
        self.llm.script({"tool_calls": [{"name": "files__read_file",
                                          "arguments": {"path": "x"}}],
                         "malformed_tool_arguments": True},
                        {"text": "sorry"})
        status, events = self.chat("go")
        self.assertIn("tool_error", [e for e, _ in events])
        self.assertEqual(events[-1][0], "final")

    def test_history_in_order_and_clearable(self):
        self.llm.script({"text": "first answer"}, {"text": "second answer"})
        self.chat("one")
        self.chat("two")
        status, _, data = self.b.request("GET", "/llmchat/history")
        msgs = json.loads(data)["messages"]
        self.assertEqual([m["role"] for m in msgs],
                         ["user", "assistant", "user", "assistant"])
        self.assertEqual(msgs[0]["content"], "one")
        self.assertEqual(msgs[3]["content"], "second answer")
        status, _, _ = self.b.request("DELETE", "/llmchat/history")
        self.assertEqual(status, 200)
        _, _, data = self.b.request("GET", "/llmchat/history")
        self.assertEqual(json.loads(data)["messages"], [])


class ChatErrorsTest(ChatBase):
    limits = "limits { tool-rounds 2 llm-timeout 2s max-result-bytes 1K }"

    def test_large_tool_results_are_truncated(self):
        self.llm.script({"tool_calls": [{"name": "files__read_file",
                                          "arguments": {"path": self.big}}]},
                        {"text": "long file"})
        status, events = self.chat("read the big file")
        self.assertEqual(events[-1][0], "final")
        sent = json.dumps(self.llm.requests()[-1]["body"])
        self.assertIn("[... truncated by mcpbroker]", sent)
        self.assertNotIn("A" * 1100, sent)
        self.assertIn("A" * 1000, sent)

    def test_validation_errors_are_422(self):
        for body, field in (({}, "provider"),
                            ({"provider": "nope"}, "provider"),
                            ({"provider": "llm", "config":
                              {"temperature": 5}}, "temperature"),
                            ({"provider": "llm", "toolset": "x"},
                             "toolset")):
            status, doc = self.post("/llmchat/connect", body)
            self.assertEqual(status, 422, body)
            self.assertIn(field, doc["error"]["message"])
        status, doc = self.post("/llmchat/chat", {"message": ""})
        self.assertEqual(status, 422)
        for path in ("/llmchat/connect", "/llmchat/chat"):
            status, _, data = self.b.request("POST", path)
            self.assertEqual(status, 422, path)
        status, doc = self.post("/llmchat/chat", {"text": "hi"})
        self.assertEqual(status, 422)
        self.assertIn("message", doc["error"]["message"])
        status, _, _ = self.b.request("POST", "/llmchat/chat", "{nope")
        self.assertEqual(status, 400)

    def test_round_limit(self):
        self.llm.script(self.read_file_step(), self.read_file_step(),
                        self.read_file_step())
        status, events = self.chat("loop forever")
        self.assertEqual(events[-1][0], "error")
        self.assertIn("tool-rounds", events[-1][1]["message"])

    def test_last_round_of_failing_calls_ends_cleanly(self):
        self.llm.script({"tool_calls": [{"name": "nope__a", "arguments": {}},
                                        {"name": "nope__b", "arguments": {}}]},
                        {"tool_calls": [{"name": "nope__c",
                                         "arguments": {}}]})
        status, events = self.chat("call tools that do not exist")
        self.assertEqual(events[-1][0], "error")
        self.assertEqual(self.b.get("/healthz")[0], 200)
        self.llm.script({"text": "still here"})
        status, doc = self.chat("hello", streaming=False)
        self.assertEqual(doc["content"], "still here")

    def test_bad_key_is_400_without_the_key(self):
        self.llm.script({"error": {"status": 401}})
        status, doc = self.chat("hi", streaming=False)
        self.assertEqual(status, 400, doc)
        self.assertEqual(doc["error"]["code"], "provider_credentials")
        self.assertNotIn(KEY, json.dumps(doc))
        self.assertNotIn(KEY, self.b.log())

    def test_unreachable_provider_is_503(self):
        self.post("/llmchat/connect", {"provider": "down"})
        status, doc = self.chat("hi", streaming=False)
        self.assertEqual(status, 503, doc)
        self.assertIn("base-url", doc["error"]["message"])

    def test_timeout_is_504_and_the_next_message_works(self):
        self.llm.script({"hang": True}, {"text": "back again"})
        status, doc = self.chat("hi", streaming=False)
        self.assertEqual(status, 504, doc)
        status, doc = self.chat("hi again", streaming=False)
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["content"], "back again")

    def test_stop_mid_stream(self):
        self.llm.script({"text": "word " * 200, "chunk_delay_ms": 50})
        threading.Timer(0.5, lambda: self.post("/llmchat/stop", {})).start()
        status, events = self.chat("talk a lot")
        self.assertEqual(events[-1][0], "error")
        self.assertIn("stopped", events[-1][1]["message"])
        # The session is usable at once.
        self.llm.script({"text": "fresh"})
        status, doc = self.chat("again", streaming=False)
        self.assertEqual(doc["content"], "fresh")

    def test_client_going_away_stops_the_turn(self):
        self.llm.script({"text": "word " * 400, "chunk_delay_ms": 50})

        def hang_up(conn):
            time.sleep(0.3)
            conn.sock.shutdown(2)
            conn.close()
            raise ConnectionError("hung up")

        with self.assertRaises(Exception):
            self.chat("talk", on_open=hang_up)
        self.llm.script({"text": "after"})
        wait_for(lambda: self.chat("again", streaming=False)[0] == 200,
                 timeout=10, what="session free again")


class ChatCancelTest(unittest.TestCase):
    """Stop reaches the MCP server as notifications/cancelled."""

    def test_stop_cancels_the_tool_call(self):
        from mcpfixtures import V2_SERVER
        llm = FakeLLM()
        self.addCleanup(llm.stop)
        log = tempfile.NamedTemporaryFile(delete=False, suffix=".log")
        log.close()
        os.chmod(log.name, 0o666)
        self.addCleanup(os.unlink, log.name)
        os.environ["FAKE_LLM_KEY"] = KEY
        os.environ["MCP_V2_LOG"] = log.name
        b = Broker('provider "llm" { %s }\n'
                   'server "v2" { command "%s" "%s" "stdio" '
                   'env "MCP_V2_LOG" }\nallow tool "*"'
                   % (PROVIDERS["openai"] % llm.port, node(), V2_SERVER))
        self.addCleanup(b.stop)
        b.start()
        status, _, _ = b.request("POST", "/llmchat/connect",
                                 '{"provider":"llm"}')
        self.assertEqual(status, 200)
        llm.script({"tool_calls": [{"name": "v2__slow",
                                    "arguments": {"ms": 30000}}]})
        threading.Timer(1.5, lambda: b.request("POST", "/llmchat/stop",
                                               "{}")).start()
        status, events = sse_events(b.port, "/llmchat/chat",
                                    {"message": "take your time"})
        self.assertEqual([e for e, _ in events][0], "tool_start")
        self.assertEqual(events[-1][0], "error")

        def cancelled():
            with open(log.name) as f:
                return "slow cancelled" in f.read()
        wait_for(cancelled, timeout=10, what="the server saw the cancel")
        # The stopped call has its result in history: the next turn is
        # valid for the provider, and the worker was not restarted.
        worker = b.processes()["worker v2"]["pid"]
        llm.script({"text": "after the stop"})
        status, doc = sse_events(b.port, "/llmchat/chat",
                                 {"message": "again", "streaming": False})
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["content"], "after the stop")
        self.assertEqual(b.processes()["worker v2"]["pid"], worker)


class ChatPolicyTest(unittest.TestCase):
    """Who may use which tool, with which arguments."""

    def setUp(self):
        self.llm = FakeLLM()
        self.addCleanup(self.llm.stop)
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir, True)
        os.chmod(self.dir, 0o755)
        self.public = os.path.join(self.dir, "public")
        os.mkdir(self.public, 0o755)
        for path, text in ((os.path.join(self.public, "ok.txt"), "open"),
                           (os.path.join(self.dir, "secret.txt"), "hush")):
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o644)
        os.environ["FAKE_LLM_KEY"] = KEY
        self.b = Broker(
            'auth { api-keys }\nprovider "llm" { %s }\n'
            'server "files" { command "%s" "%s" "%s" }\n'
            'deny tool "files.write_*" "files.move_*"\n'
            'allow role "analyst" tool "files.read_file" where path prefix '
            '"%s/"\n'
            'allow role "analyst" tool "files.list_*"\n'
            % (PROVIDERS["openai"] % self.llm.port, node(), FILESYSTEM,
               self.dir, self.public))
        self.addCleanup(self.b.stop)
        self.b.start()
        self.keys = {
            "alice": self.b.ctl("user", "add", "-r", "analyst",
                                "alice").stdout.split()[-1],
            "bob": self.b.ctl("user", "add", "bob").stdout.split()[-1]}

    def connect(self, user):
        status, _, data = self.b.request(
            "POST", "/llmchat/connect", '{"provider":"llm"}',
            {"Authorization": "Bearer " + self.keys[user]})
        self.assertEqual(status, 200)
        return json.loads(data)

    def chat(self, user, steps):
        self.llm.script(*steps)
        conn = http.client.HTTPConnection("127.0.0.1", self.b.port,
                                          timeout=30)
        conn.request("POST", "/llmchat/chat", json.dumps(
            {"message": "go"}), {"Authorization": "Bearer " +
                                 self.keys[user]})
        body = conn.getresponse().read().decode()
        conn.close()
        return body

    def test_tool_lists_follow_the_policy(self):
        names = [t["name"] for t in self.connect("alice")["tools"]]
        self.assertIn("files__read_file", names)
        self.assertIn("files__list_directory", names)
        self.assertNotIn("files__write_file", names)
        self.assertNotIn("files__search_files", names)
        self.assertEqual(self.connect("bob")["tool_count"], 0)
        for user, want in (("alice", True), ("bob", False)):
            status, _, data = self.b.request(
                "GET", "/api/v1/tools",
                headers={"Authorization": "Bearer " + self.keys[user]})
            tools = [t["name"] for s in json.loads(data)["servers"]
                     for t in s["tools"]]
            self.assertEqual("read_file" in tools, want, user)
            self.assertNotIn("write_file", tools)

    def test_calls_are_checked_with_their_arguments(self):
        self.connect("alice")
        body = self.chat("alice", [
            {"tool_calls": [{"name": "files__read_file", "arguments":
                             {"path": self.public + "/ok.txt"}},
                            {"name": "files__read_file", "arguments":
                             {"path": self.public + "/../secret.txt"}},
                            {"name": "files__write_file", "arguments":
                             {"path": self.public + "/x", "content": "y"}}]},
            {"echo_tool_result": True}])
        self.assertIn("open", body)
        self.assertNotIn("hush", body)
        self.assertIn("refused by policy", body)
        # The forged call of a tool never offered reached no server.
        self.assertIn("no tool named", body)
        self.assertFalse(os.path.exists(self.public + "/x"))
        # Every decision is on record, before the call, with its outcome.
        out = self.b.ctl("audit", "show", "-k", "tool_call").stdout
        self.assertEqual(out.count("alice"), 3, out)
        export = [json.loads(line) for line in self.b.ctl(
            "audit", "export", "--format", "jsonl").stdout.splitlines()]
        calls = [r for r in export if r["kind"] == "tool_call"]
        self.assertEqual([json.loads(r["detail"])["decision"]
                          if isinstance(r["detail"], str)
                          else r["detail"]["decision"] for r in calls],
                         ["allow", "deny", "deny"])
        results = [r for r in export if r["kind"] == "tool_result"]
        self.assertEqual(len(results), 1)
        self.assertIn("audit trail OK", self.b.ctl("audit", "verify").stdout)
        # Over the API: a tenant-admin sees their tenant's rows only.
        for tenant, count in (("default", 3), ("other", 0)):
            key = self.b.ctl("user", "add", "-r", "tenant-admin", "-t",
                             tenant, "ta-" + tenant).stdout.split()[-1]
            status, _, data = self.b.request(
                "GET", "/api/v1/audit?kind=tool_call",
                headers={"Authorization": "Bearer " + key})
            self.assertEqual(status, 200)
            self.assertEqual(len(json.loads(data)["rows"]), count, tenant)


class ChatApprovalTest(ChatBase):
    """confirm rules: the user approves each call, for exactly its input."""
    limits = ('confirm tool "files.read_file" "files.read_text_file"\n'
              'limits { approval-timeout 1s }')

    def test_approved_call_runs(self):
        self.llm.script(self.read_file_step(), {"echo_tool_result": True})
        answers = []
        events = self.stream(lambda d: answers.append(
            self.approve(d, approve=True, input=d["input"])))
        self.assertEqual(answers[0][0], 200)
        names = [e for e, _ in events]
        self.assertLess(names.index("approval_required"),
                        names.index("tool_end"))
        self.assertIn("4-8-15-16-23-42", events[-1][1]["content"])
        self.assertIn("approved", self.b.ctl("audit", "show", "-k",
                                             "approval").stdout)

    def test_declined_call_does_not_run(self):
        self.llm.script(self.read_file_step(), {"text": "ok, I won't"})
        events = self.stream(lambda d: self.approve(d, approve=False))
        errors = [d["error"] for e, d in events if e == "tool_error"]
        self.assertIn("declined", errors[0])
        self.assertNotIn("tool_end", [e for e, _ in events])

    def test_tampered_arguments_are_refused(self):
        self.llm.script(self.read_file_step(), {"echo_tool_result": True})
        answers = []

        def answer(d):
            answers.append(self.approve(d, approve=True,
                                        input={"path": "/etc/shadow"}))
            answers.append(self.approve(d, approve=True, input=d["input"]))
        events = self.stream(answer)
        self.assertEqual(answers[0][0], 409)
        self.assertEqual(answers[1][0], 200)
        self.assertIn("4-8-15-16-23-42", events[-1][1]["content"])

    def test_calls_that_share_an_id_need_their_input(self):
        """Ids are the provider's: two waiting calls may share one, and an
        approval without the input could run the other."""
        other = os.path.join(os.path.dirname(self.file), "other.txt")
        with open(other, "w") as f:
            f.write("the other one\n")
        os.chmod(other, 0o644)
        self.addCleanup(os.unlink, other)
        self.llm.script({"tool_calls": [
            {"name": "files__read_file", "arguments": {"path": self.file},
             "id": "dup"},
            {"name": "files__read_file", "arguments": {"path": other},
             "id": "dup"}]}, {"echo_tool_result": True})
        answers = []

        def answer(d):
            if not answers:
                answers.append(self.approve(d, approve=True))
            answers.append(self.approve(d, approve=True, input=d["input"]))
        events = self.stream(answer)
        self.assertEqual((answers[0][0], answers[0][1]["error"]["code"]),
                         (409, "ambiguous_call"))
        self.assertEqual([a[0] for a in answers[1:]], [200, 200])
        self.assertEqual(len([e for e, _ in events if e == "tool_end"]), 2)

    def test_same_id_and_input_of_two_tools_is_ambiguous(self):
        """Even with the input: the user approved one tool, not the
        other that happens to take the same arguments."""
        self.llm.script({"tool_calls": [
            {"name": "files__read_file", "arguments": {"path": self.file},
             "id": "dup"},
            {"name": "files__read_text_file",
             "arguments": {"path": self.file}, "id": "dup"}]},
            {"text": "done"})
        answers = []

        def answer(d):
            if not answers:
                answers.append(self.approve(d, approve=True,
                                            input=d["input"]))
        self.stream(answer)
        self.assertEqual((answers[0][0], answers[0][1]["error"]["code"]),
                         (409, "ambiguous_call"))

    def test_unanswered_approval_expires(self):
        self.llm.script(self.read_file_step(), {"text": "gave up"})
        events = self.stream(None)
        errors = [d["error"] for e, d in events if e == "tool_error"]
        self.assertIn("no approval came in time", errors[0])
        self.assertEqual(events[-1][0], "final")

    def test_json_answers_cannot_ask(self):
        self.llm.script(self.read_file_step(), {"text": "no"})
        status, doc = self.chat("read it", streaming=False)
        self.assertEqual(status, 200)
        self.assertIn("only a streaming chat",
                      doc["tool_invocations"][0]["output"])


class ChatApprovalReloadTest(ChatBase):
    """A call waiting for approval is decided again when the configuration
    is reloaded: one the new rules deny does not run on approval."""
    limits = ('confirm tool "files.read_file"\n'
              'limits { approval-timeout 30s }')

    def test_a_reload_that_denies_refuses_the_waiting_call(self):
        self.llm.script(self.read_file_step(), {"text": "refused, then"})
        answers = []

        def answer(d):
            with open(self.b.conf) as f:
                text = f.read()
            self.b.write_config(None, raw=text.replace(
                'confirm tool "files.read_file"',
                'deny tool "files.read_file"'))
            self.b.signal(signal.SIGHUP)
            self.b.wait_log(r"refused while it waited for approval")
            answers.append(self.approve(d, approve=True, input=d["input"]))
        events = self.stream(answer)
        errors = [d["error"] for e, d in events if e == "tool_error"]
        self.assertEqual(len(errors), 1, events)
        self.assertIn("refused while it waited for approval, by the "
                      "configuration loaded since", errors[0])
        self.assertNotIn("tool_end", [e for e, _ in events])
        self.assertNotIn(SECRET_TEXT, json.dumps(events))
        # the approval that came after it finds nothing to run
        self.assertEqual(answers[0][0], 404, answers)
        rows = [json.loads(line) for line in self.b.ctl(
            "audit", "export", "--format", "jsonl").stdout.splitlines()]
        approvals = [r for r in rows if r["kind"] == "approval"]
        self.assertEqual([a["detail"]["answer"] for a in approvals],
                         ["refused"])
        self.assertIn("denied by rule", approvals[0]["detail"]["reason"])
        # after the reload's own row, which it refers to
        reloads = [r["id"] for r in rows if r["kind"] == "system" and
                   r["detail"].get("event") == "config_reloaded"]
        self.assertEqual(len(reloads), 1)
        self.assertLess(reloads[0], approvals[0]["id"])


class ChatUsersTest(unittest.TestCase):
    """Two users at once, each with an API key: only their own history."""

    def setUp(self):
        self.llm = FakeLLM()
        self.addCleanup(self.llm.stop)
        os.environ["FAKE_LLM_KEY"] = KEY
        self.b = Broker('auth { api-keys }\nprovider "llm" { %s }'
                        % (PROVIDERS["openai"] % self.llm.port))
        self.addCleanup(self.b.stop)
        self.b.start()
        self.keys = {u: self.b.ctl("user", "add", u).stdout.split()[-1]
                     for u in ("alice", "bob")}

    def call(self, user, method, path, body=None):
        status, _, data = self.b.request(
            method, path, json.dumps(body) if body is not None else None,
            {"Authorization": "Bearer " + self.keys[user],
             "Content-Type": "application/json"})
        return status, json.loads(data)

    def test_two_users_see_only_their_own_history(self):
        self.llm.script(*[{"text": "reply %d" % i, "chunk_delay_ms": 20}
                          for i in range(4)])
        for u in self.keys:
            self.assertEqual(self.call(u, "POST", "/llmchat/connect",
                                       {"provider": "llm"})[0], 200)
        results = {}

        def talk(user):
            for i in range(2):
                results[(user, i)] = self.call(
                    user, "POST", "/llmchat/chat",
                    {"message": "%s says %d" % (user, i),
                     "streaming": False})

        threads = [threading.Thread(target=talk, args=(u,))
                   for u in self.keys]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertTrue(all(r[0] == 200 for r in results.values()),
                        results)
        for user in self.keys:
            status, doc = self.call(user, "GET", "/llmchat/history")
            said = [m["content"] for m in doc["messages"]
                    if m["role"] == "user"]
            self.assertEqual(said, ["%s says 0" % user, "%s says 1" % user])
        status, _ = self.call("alice", "GET", "/llmchat/status/bob")
        self.assertEqual(status, 403)
        # A refused key is on the audit trail.
        status, _, _ = self.b.request("GET", "/llmchat/status/x", headers={
            "Authorization": "Bearer mcpb_not-a-real-key-0000000000"})
        self.assertEqual(status, 401)
        self.assertIn("auth", self.b.ctl("audit", "show", "-k",
                                         "auth").stdout)


def provider_case(name):
    cls = type("ChatWith_" + name.replace("-", "_"), (ChatBase,),
               {"provider": name})

    def test_read_file_answer(self):
        self.llm.script(self.read_file_step(), {"echo_tool_result": True})
        status, events = self.chat("What is the vault code?")
        self.assertEqual(status, 200)
        self.assertEqual(events[-1][0], "final", events)
        self.assertIn("4-8-15-16-23-42", events[-1][1]["content"])
        starts = [d["id"] for e, d in events if e == "tool_start"]
        ends = [d["id"] for e, d in events if e == "tool_end"]
        self.assertEqual(starts, ends)
        # Two rounds, each reported once however the provider streams it.
        self.assertEqual(events[-1][1]["usage"],
                         {"input_tokens": 20, "output_tokens": 10})
        # The configured system prompt went to the model, in its format.
        self.assertIn(SYSTEM_PROMPT, json.dumps(self.llm.requests()[0]))

    cls.test_read_file_answer = test_read_file_answer
    return cls


for _name in PROVIDERS:
    globals()["ChatWith_" + _name.replace("-", "_")] = provider_case(_name)


if __name__ == "__main__":
    unittest.main()
