"""`mcpbrokerctl backup` and the copy kept before a migration, through the
real daemon: backups taken while four users chat (so the controller writes
between the backup's steps) each pass the sqlite3 command's integrity and
foreign key checks, hold whole conversations and the row that records the
backup, and a daemon started on a copy finds its audit trail intact and
its users' keys good; the file is the caller's, mode 0600, and a failed
backup leaves nothing behind.  A database of schema version 3 is copied
to mcpbroker.db.bak-v3 before the daemon migrates it."""
import os
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import threading
import time
import unittest

from broker import MCPBROKERCTL, Broker
from llmfixtures import KEY, PROVIDERS, FakeLLM
from test_conversations import Client

HERE = os.path.dirname(os.path.abspath(__file__))


def stop_daemon(b):
    """Stop the daemon, keeping its directory, to start it again."""
    b.signal(15)
    b.wait_exit()
    b._log_thread.join(timeout=5)
    b.proc.stderr.close()
    b._log_thread = None
    b.log_lines = []


def sqlite_cli(path, query):
    r = subprocess.run(["sqlite3", path, query], capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError("sqlite3 %s %r: %s" % (path, query, r.stderr))
    return r.stdout.strip()


class BackupTest(unittest.TestCase):
    def setUp(self):
        self.llm = FakeLLM()
        self.addCleanup(self.llm.stop)
        os.environ["FAKE_LLM_KEY"] = KEY
        self.b = Broker('auth { api-keys }\nprovider "llm" { %s }\n'
                        % (PROVIDERS["openai"] % self.llm.port))
        self.addCleanup(self.b.stop)
        self.out = tempfile.mkdtemp(prefix="mcpbroker-backup-")
        self.addCleanup(shutil.rmtree, self.out, True)

    def filler(self, megabytes):
        """Pages enough that a backup takes many passes of the loop."""
        db = sqlite3.connect(os.path.join(self.b.dir, "state",
                                          "mcpbroker.db"), timeout=10)
        with db:
            db.execute("CREATE TABLE filler (b BLOB)")
            for _ in range(megabytes):
                db.execute("INSERT INTO filler VALUES (randomblob(1048576))")
        db.close()

    def backup(self, name, check=True):
        path = os.path.join(self.out, name)
        r = self.b.ctl("backup", path, check=check)
        return path, r

    def test_backup_while_chatting(self):
        self.b.start()
        keys = {}
        for name in ("alice", "bob", "carol", "dave"):
            r = self.b.ctl("user", "add", "-t", "acme", name)
            keys[name] = r.stdout.strip().splitlines()[-1]
        # Restart on a database grown with filler: 12 MiB, 12 passes.
        stop_daemon(self.b)
        self.filler(12)
        self.b.start()

        stop = threading.Event()
        errors = []
        turns = {name: 0 for name in keys}

        def chatter(name):
            c = Client(self.b, keys[name])
            try:
                c.connect()
                while not stop.is_set():
                    status, events = c.chat("turn %d of %s"
                                            % (turns[name], name))
                    if status != 200 or events[-1][0] != "final":
                        errors.append((name, status, events))
                        return
                    turns[name] += 1
            except Exception as e:          # reported below
                errors.append((name, repr(e)))

        threads = [threading.Thread(target=chatter, args=(n,))
                   for n in keys]
        for t in threads:
            t.start()
        try:
            paths, started = [], []
            for i in range(3):
                started.append(int(time.time() * 1000))
                path, r = self.backup("copy%d.db" % i)
                self.assertRegex(r.stdout, r"^backup written to %s: \d+ "
                                 r"pages, \d+ bytes\n$" % path)
                paths.append(path)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        self.assertEqual(errors, [])
        self.assertTrue(all(n > 0 for n in turns.values()), turns)
        self.b.wait_log(r"controller: backup: \d+ pages")

        # Conversations went on while the copies were made, and what they
        # wrote meanwhile is in a copy: a copy is of the end, not the start.
        # (Not every copy: a fast one may finish between two messages.)
        newer = [int(sqlite_cli(path, "SELECT COUNT(*) FROM messages "
                                "WHERE ts > %d" % t0))
                 for path, t0 in zip(paths, started)]
        self.assertGreater(max(newer), 0, list(zip(paths, newer)))
        for path in paths:
            st = os.stat(path)
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
            self.assertEqual(st.st_uid, os.geteuid())
            self.assertEqual(sqlite_cli(path, "PRAGMA integrity_check"),
                             "ok")
            self.assertEqual(sqlite_cli(path, "PRAGMA foreign_key_check"),
                             "")
            # One file: not in WAL mode, nothing beside it.
            self.assertEqual(sqlite_cli(path, "PRAGMA journal_mode"),
                             "delete")
            self.assertFalse(os.path.exists(path + "-wal"))
            self.assertEqual(sqlite_cli(path, "SELECT COUNT(*) FROM filler"),
                             "12")
            # Whole turns: every stored answer follows its question (a
            # copy made during a turn holds its question alone, the
            # conversation's first as well).
            roles = sqlite_cli(path, "SELECT group_concat(role, ',') FROM "
                               "(SELECT conversation, role FROM messages "
                               "ORDER BY conversation, seq) GROUP BY "
                               "conversation").splitlines()
            for conv in roles:
                self.assertRegex(conv, r"^user(,assistant,user)*"
                                 r"(,assistant)?$")
            self.assertIn('{"op":"backup"}',
                          sqlite_cli(path, "SELECT detail FROM audit WHERE "
                                     "kind = 'admin'"))
        # Nothing left in the state directory but the database itself.
        self.assertEqual(sorted(f for f in os.listdir(os.path.join(
            self.b.dir, "state")) if not f.startswith("mcpbroker.db-")),
            ["mcpbroker.db"])

        # A daemon on the last copy: the trail is intact, the keys work.
        with Broker('auth { api-keys }\nprovider "llm" { %s }\n'
                    % (PROVIDERS["openai"] % self.llm.port)) as copy:
            os.makedirs(os.path.join(copy.dir, "state"), mode=0o750)
            shutil.copy(paths[-1], os.path.join(copy.dir, "state",
                                                "mcpbroker.db"))
            copy.start()
            r = copy.ctl("audit", "verify")
            self.assertRegex(r.stdout, r"^audit trail OK: \d+ rows")
            for name, key in keys.items():
                status, doc = Client(copy, key).call(
                    "GET", "/llmchat/status/" + name)
                self.assertEqual(status, 200, doc)
            status, doc = Client(copy, keys["alice"]).call(
                "GET", "/api/v1/conversations")
            self.assertEqual(status, 200, doc)
            self.assertGreaterEqual(len(doc["conversations"]), 1)

    def test_refused(self):
        self.b.start()
        # A directory that is not there: the caller's own error.
        r = self.b.ctl("backup", os.path.join(self.out, "no", "x.db"),
                       check=False)
        self.assertEqual(r.returncode, 1)
        # Not through the daemon: nothing to copy, nothing left behind.
        r = subprocess.run([MCPBROKERCTL, "-s", os.path.join(self.out,
                            "nothing.sock"), "backup",
                            os.path.join(self.out, "x.db")],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(os.listdir(self.out), [])
        r = self.b.ctl("backup", check=False)
        self.assertEqual(r.returncode, 2)


class MigrationCopyTest(unittest.TestCase):
    def test_copy_before_migration(self):
        with open(os.path.join(HERE, "..", "data", "schema-v3.sql")) as f:
            v3 = f.read()
        with Broker("auth { api-keys }\n") as b:
            state = os.path.join(b.dir, "state")
            os.makedirs(state, mode=0o750)
            db = sqlite3.connect(os.path.join(state, "mcpbroker.db"))
            db.executescript(v3)
            db.close()
            b.start()
            b.wait_log(r"controller: database: schema version 3 copied to "
                       r"\S+/mcpbroker.db.bak-v3 before migrating")
            copy = os.path.join(state, "mcpbroker.db.bak-v3")
            self.assertEqual(sqlite_cli(copy, "PRAGMA user_version"), "3")
            self.assertEqual(sqlite_cli(copy, "PRAGMA integrity_check"), "ok")
            self.assertEqual(sqlite_cli(copy, "SELECT name FROM users ORDER "
                                        "BY name").splitlines(),
                             sqlite_cli(os.path.join(state, "mcpbroker.db"),
                                        "SELECT name FROM users ORDER BY "
                                        "name").splitlines())
            self.assertNotEqual(sqlite_cli(os.path.join(
                state, "mcpbroker.db"), "PRAGMA user_version"), "3")
            if os.geteuid() == 0:
                # Made with the state directory owner's identity.
                self.assertEqual(os.stat(copy).st_uid,
                                 os.stat(state).st_uid)
            # The next start has nothing to migrate and copies nothing.
            os.unlink(copy)
            stop_daemon(b)
            b.start()
            self.assertFalse(os.path.exists(copy))
            self.assertNotIn("copied to", b.log())


if __name__ == "__main__":
    unittest.main()
