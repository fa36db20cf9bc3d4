"""The audit trail: administrators' changes are recorded, `mcpbrokerctl
audit verify` passes on an untouched trail and names the first bad row
after the database is edited behind the daemon's back (daemon stopped,
rows changed with Python's sqlite3, daemon started again), and `audit
export --format jsonl` gives one JSON object per line."""
import hashlib
import json
import os
import re
import signal
import sqlite3
import struct
import unittest

from broker import Broker


def encode_text(value):
    """A text field as the hash sees it: presence byte, length, bytes."""
    if value is None:
        return b"\0" + struct.pack(">Q", 0)
    data = value.encode() if isinstance(value, str) else bytes(value)
    return b"\1" + struct.pack(">Q", len(data)) + data


def row_hash(row_id, ts, kind, user, tenant, detail, prev_hash):
    """The chain's hash, written from docs/ARCHITECTURE.md, not the C."""
    return hashlib.sha256(
        b"mcpbroker-audit-v1" + struct.pack(">Qq", row_id, ts)
        + encode_text(kind) + encode_text(user) + encode_text(tenant)
        + encode_text(detail) + bytes(prev_hash)).digest()


class AuditTest(unittest.TestCase):
    def setUp(self):
        self.b = Broker('provider "llm" { type ollama base-url '
                        '"http://127.0.0.1:1" model "m" }')
        self.addCleanup(self.b.stop)
        self.b.start()
        self.db = os.path.join(self.b.dir, "state", "mcpbroker.db")

    def users(self, *names):
        for name in names:
            self.b.ctl("user", "add", "-r", "analyst", "-t", "acme", name)

    def verify(self):
        return self.b.ctl("audit", "verify", check=False)

    def rows(self):
        with sqlite3.connect(self.db) as conn:
            return conn.execute("SELECT id, ts, kind, user, tenant, detail, "
                                "prev_hash, hash FROM audit ORDER BY id"
                                ).fetchall()

    # -- the daemon stopped, the file edited, the daemon started -------
    def stop_daemon(self):
        self.b.signal(signal.SIGTERM)
        self.b.wait_exit()
        self.b._log_thread.join(timeout=5)
        self.b.proc.stderr.close()

    def tamper(self, sql):
        """What someone with write access to the file would do: the
        triggers that keep our own code honest are dropped first."""
        owner = os.stat(self.db)
        conn = sqlite3.connect(self.db)
        with conn:
            conn.executescript("DROP TRIGGER IF EXISTS audit_no_update;"
                               "DROP TRIGGER IF EXISTS audit_no_delete;"
                               + sql)
        conn.close()
        state = os.path.dirname(self.db)
        for name in os.listdir(state):      # the daemon's user must open them
            os.chown(os.path.join(state, name), owner.st_uid, owner.st_gid)

    def snapshot(self):
        pristine = sqlite3.connect(":memory:")
        with sqlite3.connect(self.db) as conn:
            conn.backup(pristine)
        return pristine

    def restore(self, pristine):
        conn = sqlite3.connect(self.db)
        pristine.backup(conn)
        conn.close()

    # -- tests -----------------------------------------------------------
    def test_admin_changes_are_recorded(self):
        self.users("alice")
        self.b.ctl("user", "key", "alice")
        self.b.ctl("user", "del", "alice")
        # A refused change is not a change: no row.
        self.b.ctl("user", "del", "nobody-here", check=False)
        out = self.b.ctl("audit", "show").stdout.splitlines()
        self.assertRegex(out[0], r"^ID\s+TIME \(UTC\)\s+KIND\s+USER\s+TENANT"
                                 r"\s+DETAIL$")
        self.assertEqual(len(out), 4, out)
        self.assertRegex(out[1], r'^1\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z'
                                 r'\s+admin\s+-\s+-\s+\{"op":"user_add",'
                                 r'"name":"alice","tenant":"acme",'
                                 r'"roles":"analyst"\}$')
        self.assertIn('{"op":"user_key","name":"alice"}', out[2])
        self.assertIn('{"op":"user_del","name":"alice"}', out[3])
        out = self.b.ctl("audit", "show", "-n", "1", "-k",
                         "admin").stdout.splitlines()
        self.assertEqual(len(out), 2)
        self.assertTrue(out[1].startswith("3 "), out)
        out = self.b.ctl("audit", "show", "-u", "alice").stdout.splitlines()
        self.assertEqual(len(out), 1)       # admin rows have no acting user
        r = self.verify()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        head = self.rows()[-1][7].hex()
        self.assertEqual(r.stdout.strip(),
                         "audit trail OK: 3 rows, head %s" % head)

    def test_chain_matches_the_documented_encoding(self):
        self.users("a", "b", "c")
        prev = bytes(32)
        for (row_id, ts, kind, user, tenant, detail, prev_hash,
             digest) in self.rows():
            self.assertEqual(prev_hash, prev)
            self.assertEqual(digest, row_hash(row_id, ts, kind, user, tenant,
                                              detail, prev_hash))
            prev = digest

    def test_export_jsonl(self):
        self.users("a", "b", "c", "d")
        r = self.b.ctl("audit", "export", "--format", "jsonl")
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 4)
        db = self.rows()
        for i, line in enumerate(lines):
            o = json.loads(line)
            self.assertEqual(o["id"], i + 1)
            self.assertEqual(o["kind"], "admin")
            self.assertIsNone(o["user"])
            self.assertEqual(o["detail"]["op"], "user_add")
            self.assertEqual(o["hash"], db[i][7].hex())
            self.assertEqual(o["prev_hash"], db[i][6].hex())
            self.assertEqual(o["ts"], db[i][1])
        self.assertEqual(self.b.ctl("audit", "export").stdout, r.stdout)
        r = self.b.ctl("audit", "export", "--format", "csv", check=False)
        self.assertEqual(r.returncode, 2)

    def test_long_trail_pages(self):
        """More rows than one answer holds: export pages through them, and
        rows written in Python from the documented encoding verify."""
        self.users("a")
        self.stop_daemon()
        owner = os.stat(self.db)
        detail = json.dumps({"tool": "files.read_file",
                             "arguments": {"path": "/srv/" + "x" * 300}},
                            separators=(",", ":"))
        with sqlite3.connect(self.db) as conn:
            last_id, prev = conn.execute("SELECT last_id, last_hash FROM "
                                         "audit_checkpoint").fetchone()
            rows = []
            for i in range(last_id + 1, last_id + 12001):
                h = row_hash(i, 1700000000000 + i, "tool_call", "alice",
                             "acme", detail, prev)
                rows.append((i, 1700000000000 + i, "tool_call", "alice",
                             "acme", detail, prev, h))
                prev = h
            conn.executemany("INSERT INTO audit VALUES (?, ?, ?, ?, ?, ?, "
                             "?, ?)", rows)
            conn.execute("UPDATE audit_checkpoint SET last_id = ?, "
                         "last_hash = ?", (rows[-1][0], prev))
        conn.close()
        state = os.path.dirname(self.db)
        for name in os.listdir(state):
            os.chown(os.path.join(state, name), owner.st_uid, owner.st_gid)
        self.b.start()
        r = self.verify()
        self.assertEqual(r.stdout.strip(), "audit trail OK: 12001 rows, "
                         "head %s" % prev.hex())
        lines = self.b.ctl("audit", "export").stdout.splitlines()
        self.assertEqual([json.loads(l)["id"] for l in lines],
                         list(range(1, 12002)))
        out = self.b.ctl("audit", "show", "-n", "3", "-u",
                         "alice").stdout.splitlines()
        self.assertEqual([l.split()[0] for l in out[1:]],
                         ["11999", "12000", "12001"])

    def test_tampering_is_found(self):
        self.users("u1", "u2", "u3", "u4", "u5", "u6")
        self.assertEqual(self.verify().returncode, 0)
        self.stop_daemon()
        pristine = self.snapshot()
        cases = [
            ("UPDATE audit SET detail = '{\"op\":\"user_add\",\"name\":"
             "\"mallory\"}' WHERE id = 3", r"row 3: contents changed"),
            ("UPDATE audit SET ts = ts - 1000 WHERE id = 4",
             r"row 4: contents changed"),
            ("DELETE FROM audit WHERE id = 3",
             r"row 3: missing \(ids jump from 2 to 4\)"),
            ("UPDATE audit SET id = -3 WHERE id = 3;"
             "UPDATE audit SET id = 3 WHERE id = 2;"
             "UPDATE audit SET id = 2 WHERE id = -3;",
             r"row 2: out of order"),
            # Rows the daemon adds at start would follow the checkpoint.
            ("DELETE FROM audit WHERE id > 4",
             r"rows after 4 missing \(checkpoint says 6\)"
             r"|rows 5-6: missing"),
            ("DELETE FROM audit_checkpoint", r"the checkpoint is missing"),
        ]
        for sql, want in cases:
            with self.subTest(sql=sql):
                self.restore(pristine)
                self.tamper(sql)
                self.b.start()
                try:
                    r = self.verify()
                finally:
                    self.stop_daemon()
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertRegex(r.stdout, r"^audit trail BROKEN: (%s)"
                                 % want)
        self.restore(pristine)
        self.b.start()
        self.assertEqual(self.verify().returncode, 0)

    def test_append_only_inside(self):
        """The triggers refuse edits on a connection that has not
        dropped them, and the daemon is unharmed."""
        self.users("x")
        with sqlite3.connect(self.db) as conn:
            with self.assertRaisesRegex(sqlite3.DatabaseError,
                                        "append-only"):
                conn.execute("DELETE FROM audit")
        self.assertEqual(self.verify().returncode, 0)
        self.assertTrue(re.search(r"OK: 1 rows", self.verify().stdout))


if __name__ == "__main__":
    unittest.main()
