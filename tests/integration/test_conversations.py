"""Stored conversations through the real daemon: they outlive a restart
and resume with their history, are listed, searched, exported, kept from
other tenants, erased row by row (checked with the sqlite3 command), and
purged when their tenant's retention is over."""
import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from broker import Broker, wait_for
from llmfixtures import KEY, PROVIDERS, FakeLLM
from mcpfixtures import FILESYSTEM, node

SECRET_TEXT = "The vault code is 4-8-15-16-23-42."


def restart(b):
    """Stop the daemon and start it again on the same state directory."""
    b.proc.send_signal(signal.SIGTERM)
    b.proc.wait(timeout=10)
    b._log_thread.join(timeout=5)
    b.proc.stderr.close()
    b._log_thread = None
    b.start()


def db_path(b):
    return os.path.join(b.dir, "state", "mcpbroker.db")


def sqlite(b, query):
    """The sqlite3 command's answer, as a reader beside the daemon."""
    r = subprocess.run(["sqlite3", db_path(b), query], capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0:
        raise AssertionError("sqlite3 %r: %s" % (query, r.stderr))
    return r.stdout.strip()


class Client:
    """One user of the API, with their key."""

    def __init__(self, b, key):
        self.b = b
        self.key = key

    def headers(self):
        h = {"Content-Type": "application/json"}
        if self.key:
            h["Authorization"] = "Bearer " + self.key
        return h

    def call(self, method, path, body=None):
        status, _, data = self.b.request(
            method, path, json.dumps(body) if body is not None else None,
            self.headers())
        return status, json.loads(data) if data else None

    def connect(self, **kw):
        status, doc = self.call("POST", "/llmchat/connect",
                                dict({"provider": "llm"}, **kw))
        if status != 200:
            raise AssertionError("connect: %d %r" % (status, doc))
        return doc

    def chat(self, message, **kw):
        """SSE events [(event, data)], or (status, doc) when not a stream."""
        conn = http.client.HTTPConnection("127.0.0.1", self.b.port,
                                          timeout=60)
        conn.request("POST", "/llmchat/chat",
                     json.dumps(dict({"message": message}, **kw)),
                     self.headers())
        r = conn.getresponse()
        if r.getheader("Content-Type", "").startswith("application/json"):
            doc = json.loads(r.read())
            conn.close()
            return r.status, doc
        events, event, data = [], None, []
        for raw in r:
            line = raw.decode().rstrip("\r\n")
            if line == "":
                if event is not None:
                    events.append((event, json.loads("\n".join(data))))
                event, data = None, []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        conn.close()
        return r.status, events

    def conversations(self, query=""):
        status, doc = self.call("GET", "/api/v1/conversations" + query)
        if status != 200:
            raise AssertionError("list: %d %r" % (status, doc))
        return doc


class ConversationBase(unittest.TestCase):
    extra = ""

    @classmethod
    def setUpClass(cls):
        cls.llm = FakeLLM()
        cls.dir = tempfile.mkdtemp()
        os.chmod(cls.dir, 0o755)
        cls.file = os.path.join(cls.dir, "note.txt")
        with open(cls.file, "w") as f:
            f.write(SECRET_TEXT + "\n")
        os.chmod(cls.file, 0o644)
        os.environ["FAKE_LLM_KEY"] = KEY
        cls.b = Broker('auth { api-keys }\n'
                       'provider "llm" { %s price input 1 output 2 }\n'
                       'server "files" { command "%s" "%s" "%s" }\n'
                       'allow tool "*"\n%s'
                       % (PROVIDERS["openai"] % cls.llm.port, node(),
                          FILESYSTEM, cls.dir, cls.extra))
        cls.b.start()
        cls.users = {}
        for name, opts in (("alice", ("-t", "acme")),
                           ("bob", ("-t", "acme")),
                           ("tom", ("-t", "acme", "-r", "tenant-admin")),
                           ("carol", ("-t", "beta", "-r", "tenant-admin")),
                           ("root", ("-t", "ops", "-r", "admin"))):
            r = cls.b.ctl("user", "add", *opts, name)
            cls.users[name] = Client(cls.b, r.stdout.strip().splitlines()[-1])

    @classmethod
    def tearDownClass(cls):
        cls.b.stop()
        cls.llm.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        self.llm.reset()

    def read_file_step(self):
        return {"tool_calls": [{"name": "files__read_file",
                                "arguments": {"path": self.file}}]}


class ConversationTest(ConversationBase):
    def test_restart_keeps_conversations_and_usage_and_resumes(self):
        alice = self.users["alice"]
        calls = alice.call("GET", "/api/v1/usage")[1]["totals"]["calls"]
        cid = alice.connect()["conversation_id"]
        self.assertRegex(cid, r"^[0-9a-f]{32}$")
        self.llm.script(self.read_file_step(), {"echo_tool_result": True},
                        {"text": "second answer"})
        status, events = alice.chat("What is the vault code?")
        self.assertEqual(events[-1][0], "final", events)
        self.assertIn("4-8-15", events[-1][1]["content"])
        alice.chat("thank you")
        usage_before = alice.call("GET", "/api/v1/usage")[1]["totals"]
        self.assertEqual(usage_before["calls"], calls + 3)

        restart(self.b)

        listed = alice.conversations()["conversations"]
        mine = [c for c in listed if c["id"] == cid]
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0]["title"], "What is the vault code?")
        self.assertEqual(mine[0]["messages"], 6)
        self.assertEqual(alice.call("GET", "/api/v1/usage")[1]["totals"],
                         usage_before)
        # Resumed, the model gets the old messages with the new one.
        doc = alice.connect(conversation_id=cid)
        self.assertTrue(doc["resumed"])
        self.assertEqual(doc["conversation_id"], cid)
        self.llm.reset()
        self.llm.script({"text": "welcome back"})
        status, events = alice.chat("and now?")
        self.assertEqual(events[-1][1]["conversation_id"], cid)
        sent = self.llm.requests()[-1]["body"]["messages"]
        said = [(m["role"], m.get("content")) for m in sent]
        self.assertEqual(said[0][0], "system")
        self.assertEqual(said[1], ("user", "What is the vault code?"))
        self.assertEqual(said[-1], ("user", "and now?"))
        self.assertIn(("assistant", "second answer"), said)
        tool = [m for m in sent if m["role"] == "tool"]
        self.assertEqual(len(tool), 1)
        # Stored as a summary, so that is what comes back.
        self.assertRegex(tool[0]["content"],
                         r"^tool files__read_file: ok, \d+ bytes$")
        self.assertNotIn("4-8-15",
                         sqlite(self.b, "SELECT group_concat(content) FROM "
                                "messages WHERE role = 'tool'"))
        _, doc = alice.call("GET", "/api/v1/conversations/" + cid)
        self.assertEqual([m["role"] for m in doc["messages"]],
                         ["user", "assistant", "tool", "assistant", "user",
                          "assistant", "user", "assistant"])

    def test_someone_elses_conversation_is_404(self):
        alice, bob = self.users["alice"], self.users["bob"]
        carol, tom = self.users["carol"], self.users["tom"]
        cid = alice.connect()["conversation_id"]
        self.llm.script({"text": "hello alice"})
        alice.chat("a private question")
        path = "/api/v1/conversations/" + cid
        missing = "/api/v1/conversations/" + "0" * 32
        for who in (bob, carol):
            self.assertEqual(who.call("GET", path), who.call("GET", missing))
            self.assertEqual(who.call("GET", path)[0], 404)
            self.assertEqual(who.call("GET", path + "/export")[0], 404)
            self.assertEqual(who.call("DELETE", path)[0], 404)
            self.assertEqual(who.call("PATCH", path, {"title": "x"})[0], 404)
            status, doc = who.call("POST", "/llmchat/connect",
                                   {"provider": "llm",
                                    "conversation_id": cid})
            self.assertEqual(status, 404, doc)
        self.assertNotIn(cid, json.dumps(carol.conversations()))
        # Her tenant's tenant-admin may read it (and is on record), not
        # rename it; an admin too.
        self.assertEqual(tom.call("GET", path)[0], 200)
        self.assertEqual(self.users["root"].call("GET", path)[0], 200)
        self.assertEqual(tom.call("PATCH", path, {"title": "x"})[0], 404)
        rows = sqlite(self.b, "SELECT user FROM audit WHERE kind = "
                      "'conversation' AND detail LIKE '%" + cid + "%'")
        self.assertEqual(rows.split(), ["tom", "root"])
        status, doc = alice.call("PATCH", path, {"title": "Mine"})
        self.assertEqual((status, doc["title"]), (200, "Mine"))

    def test_erasure_removes_every_row(self):
        alice = self.users["alice"]
        cid = alice.connect()["conversation_id"]
        self.llm.script(self.read_file_step(), {"text": "done"})
        alice.chat("please remember the word PELICAN")
        calls = int(sqlite(self.b, "SELECT SUM(calls) FROM usage_daily"))
        where = "WHERE conversation = '%s'" % cid
        self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM messages " +
                                where), "4")
        self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM usage " +
                                where), "2")
        status, doc = alice.call("DELETE", "/api/v1/conversations/" + cid)
        self.assertEqual(status, 200, doc)
        for table in ("messages", "usage"):
            self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM %s %s"
                                    % (table, where)), "0")
        self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM conversations "
                                "WHERE id = '%s'" % cid), "0")
        self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM messages "
                                "WHERE content LIKE '%PELICAN%'"), "0")
        # The bill stays; the audit trail never had the words.
        self.assertEqual(int(sqlite(self.b, "SELECT SUM(calls) FROM "
                                    "usage_daily")), calls)
        self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM audit WHERE "
                                "detail LIKE '%PELICAN%'"), "0")
        self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM audit WHERE "
                                "kind = 'conversation' AND detail LIKE "
                                "'%erase%" + cid + "%'"), "1")
        # The session forgot it too, and goes on in a new conversation.
        _, doc = alice.call("GET", "/llmchat/history")
        self.assertEqual(doc["messages"], [])
        self.assertEqual(alice.call("GET", "/api/v1/conversations/" +
                                    cid)[0], 404)
        self.llm.script({"text": "fresh start"})
        status, events = alice.chat("hello again")
        self.assertNotEqual(events[-1][1]["conversation_id"], cid)

    def test_erasure_during_a_turn_leaves_nothing(self):
        """A turn still streaming ends, and what it writes as it ends
        (its message, its metered call) is erased with the rest."""
        alice = self.users["alice"]
        cid = alice.connect()["conversation_id"]
        self.llm.script({"text": "word " * 200, "chunk_delay_ms": 20})
        result = {}
        t = threading.Thread(target=lambda: result.update(
            events=alice.chat("talk for a while")[1]))
        t.start()
        wait_for(lambda: sqlite(self.b, "SELECT COUNT(*) FROM messages "
                                "WHERE conversation = '%s'" % cid) == "1",
                 what="the user's message stored")
        time.sleep(0.5)
        status, doc = alice.call("DELETE", "/api/v1/conversations/" + cid)
        self.assertEqual(status, 200, doc)
        t.join(30)
        self.assertEqual(result["events"][-1][0], "error")
        self.assertEqual(result["events"][-1][1]["code"], "erased")
        for table in ("messages", "usage"):
            self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM %s WHERE "
                                    "conversation = '%s'" % (table, cid)),
                             "0")
        self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM conversations "
                                "WHERE id = '%s'" % cid), "0")

    def test_list_pages_and_search(self):
        bob = self.users["bob"]
        ids = []
        for text in ("first topic", "discount: 50% off", "third topic",
                     "under_score"):
            ids.append(bob.connect()["conversation_id"])
            self.llm.script({"text": "ok"})
            bob.chat(text)
        seen, query = [], "?limit=3"
        while True:
            doc = bob.conversations(query)
            seen += [c["id"] for c in doc["conversations"]]
            if doc["next_cursor"] is None:
                break
            query = "?limit=3&cursor=" + doc["next_cursor"]
        self.assertEqual(seen[:4], ids[::-1])
        self.assertEqual(len(seen), len(set(seen)))
        found = bob.conversations("?q=50%25%20off")["conversations"]
        self.assertEqual([c["id"] for c in found], [ids[1]])
        self.assertEqual(bob.conversations("?q=5_%25")["conversations"], [])
        found = bob.conversations("?q=under_")["conversations"]
        self.assertEqual([c["id"] for c in found], [ids[3]])
        # Message text is searched too, not only titles.
        self.llm.script({"text": "a reply about PLATYPUS"})
        bob.chat("one more")
        found = bob.conversations("?q=platypus")["conversations"]
        self.assertEqual([c["id"] for c in found], [ids[3]])

    def test_export(self):
        alice = self.users["alice"]
        cid = alice.connect()["conversation_id"]
        self.llm.script(self.read_file_step(), {"text": "It is <b>42</b>."})
        alice.chat("# Not a heading, a `question`?")
        status, doc = alice.call("GET", "/api/v1/conversations/%s/export"
                                 "?format=md" % cid)
        self.assertEqual(status, 200, doc)
        md = doc["content"]
        self.assertTrue(md.startswith("# \\# Not a heading, a \\`question"
                                      "\\`?\n"), md)
        self.assertIn("\n> # Not a heading, a `question`?\n", md)
        self.assertIn("```json\n{\n", md)
        self.assertIn("files\\_\\_read\\_file", md)
        self.assertNotIn("<b>", md)
        status, doc = alice.call("GET", "/api/v1/conversations/%s/export"
                                 % cid)
        self.assertEqual(doc["format"], "json")
        self.assertEqual(len(doc["conversation"]["messages"]), 4)
        self.assertEqual(alice.call("GET", "/api/v1/conversations/%s/export"
                                    "?format=pdf" % cid)[0], 422)

    def test_clearing_history_starts_a_new_conversation(self):
        alice = self.users["alice"]
        cid = alice.connect()["conversation_id"]
        self.llm.script({"text": "one"})
        alice.chat("first")
        status, doc = alice.call("DELETE", "/llmchat/history")
        self.assertEqual(status, 200)
        self.assertNotEqual(doc["conversation_id"], cid)
        self.assertEqual(alice.call("GET", "/api/v1/conversations/" +
                                    cid)[0], 200)

    def test_deleting_a_user_or_tenant_cascades(self):
        r = self.b.ctl("user", "add", "-t", "gamma", "gus")
        gus = Client(self.b, r.stdout.strip().splitlines()[-1])
        r = self.b.ctl("user", "add", "-t", "gamma", "gil")
        gil = Client(self.b, r.stdout.strip().splitlines()[-1])
        for who in (gus, gil):
            who.connect()
            self.llm.script({"text": "noted"})
            who.chat("remember OSTRICH")
        self.b.ctl("user", "del", "gus")
        self.assertEqual(gus.call("GET", "/api/v1/conversations")[0], 401)
        self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM conversations "
                                "WHERE user = 'gus'"), "0")
        self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM usage WHERE "
                                "user = 'gus'"), "0")
        # Gus's share of the bill stays with the tenant, nameless.
        self.assertEqual(sqlite(self.b, "SELECT SUM(calls) FROM usage_daily "
                                "WHERE tenant = 'gamma' AND user = ''"), "1")
        r = self.b.ctl("tenant", "del", "gamma")
        self.assertIn("1 user(s), 1 conversation(s)", r.stdout)
        for table in ("users", "conversations", "usage", "usage_daily"):
            self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM %s WHERE "
                                    "tenant = 'gamma'" % table), "0")
        self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM messages "
                                "WHERE content LIKE '%OSTRICH%'"), "0")
        self.assertEqual(gil.call("GET", "/api/v1/conversations")[0], 401)
        self.assertIn("tenant_del", self.b.ctl("audit", "show", "-k",
                                               "admin").stdout)
        r = self.b.ctl("tenant", "del", "gamma", check=False)
        self.assertEqual(r.returncode, 1)


class WholeToolResultsTest(ConversationBase):
    extra = "store-tool-results yes\n"

    def test_whole_results_are_stored_when_configured(self):
        alice = self.users["alice"]
        alice.connect()
        self.llm.script(self.read_file_step(), {"text": "done"})
        alice.chat("read it")
        self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM messages WHERE "
                                "role = 'tool' AND content LIKE "
                                "'%4-8-15-16-23-42%'"), "1")


class RetentionTest(unittest.TestCase):
    """retention 2s, and a tenant that keeps everything."""

    def test_purged_at_start_by_each_tenants_retention(self):
        llm = FakeLLM()
        self.addCleanup(llm.stop)
        os.environ["FAKE_LLM_KEY"] = KEY
        b = Broker('auth { api-keys }\n'
                   'provider "llm" { %s }\n'
                   'retention 2s\nretention tenant "keep" forever\n'
                   % (PROVIDERS["openai"] % llm.port))
        self.addCleanup(b.stop)
        b.start()
        ann = Client(b, b.ctl("user", "add", "-t", "acme",
                              "ann").stdout.strip().splitlines()[-1])
        kim = Client(b, b.ctl("user", "add", "-t", "keep",
                              "kim").stdout.strip().splitlines()[-1])
        ids = {}
        for name, who in (("ann", ann), ("kim", kim)):
            ids[name] = who.connect()["conversation_id"]
            llm.script({"text": "ok"})
            who.chat("hello")
        time.sleep(3)
        restart(b)
        b.wait_log(r"retention: 1 conversation\(s\) erased")
        self.assertEqual(ann.conversations()["conversations"], [])
        self.assertEqual([c["id"] for c in
                          kim.conversations()["conversations"]],
                         [ids["kim"]])
        self.assertEqual(sqlite(b, "SELECT COUNT(*) FROM messages WHERE "
                                "conversation = '%s'" % ids["ann"]), "0")
        self.assertIn("retention_purge", b.ctl("audit", "show", "-k",
                                               "system").stdout)
        # A reload applies a new retention at once.
        b.write_config('auth { api-keys }\nprovider "llm" { %s }\n'
                       'retention 1s\n' % (PROVIDERS["openai"] % llm.port))
        b.ctl("reload")
        b.wait_log(r"retention: 1 conversation\(s\) erased(.|\n)*"
                   r"retention: 1 conversation\(s\) erased")
        self.assertEqual(kim.conversations()["conversations"], [])

    def test_a_backlog_is_erased_in_batches(self):
        """2,500 conversations past their retention when the daemon
        starts: erased 1,000 to a transaction, a pass of the loop each,
        with a log line and an audit row per batch."""
        os.environ["FAKE_LLM_KEY"] = KEY
        b = Broker('auth { api-keys }\nprovider "llm" { %s }\n'
                   'retention 1d\n' % (PROVIDERS["openai"] % 1))
        self.addCleanup(b.stop)
        b.start()
        sqlite(b, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
               "FROM n WHERE i < 2500) INSERT INTO conversations (id, user, "
               "tenant, provider, model, created, updated) SELECT "
               "printf('%032x', i), 'ann', 'acme', 'llm', 'm', 0, 0 FROM n")
        restart(b)
        b.wait_log(r"retention: 1000 conversation\(s\) erased(.|\n)*"
                   r"retention: 1000 conversation\(s\) erased(.|\n)*"
                   r"retention: 500 conversation\(s\) erased")
        self.assertEqual(sqlite(b, "SELECT COUNT(*) FROM conversations"),
                         "0")
        rows = sqlite(b, "SELECT json_extract(detail, '$.conversations') "
                      "FROM audit WHERE kind = 'system' AND json_extract("
                      "detail, '$.event') = 'retention_purge' ORDER BY id")
        self.assertEqual(rows.split(), ["1000", "1000", "500"])


if __name__ == "__main__":
    unittest.main()
