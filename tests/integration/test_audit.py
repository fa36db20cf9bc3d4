"""The audit trail: administrators' changes are recorded, `mcpbrokerctl
audit verify` passes on an untouched trail and names the first bad row
after the database is edited behind the daemon's back (daemon stopped,
rows changed with Python's sqlite3, daemon started again), and `audit
export --format jsonl` gives one JSON object per line.  A signed
checkpoint catches a cut tail that the chain alone cannot (rows deleted
with the sqlite3 command line tool); tool calls in a real chat are
recorded with their configured fields masked, filtered by tool and
decision, and exported as JSON Lines, RFC 5424 syslog and CEF in which
hostile arguments cannot start a record of their own."""
import base64
import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import struct
import subprocess
import tempfile
import unittest

from broker import MCPBROKER, MCPBROKERCTL, Broker
from llmfixtures import KEY, PROVIDERS, FakeLLM
from mcpfixtures import HOSTILE


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
        self.assertIn('{"op":"user_del","name":"alice","tenant":"acme"}',
                      out[3])
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

    def append_rows(self, n, detail_size=300):
        """n tool_call rows written in Python from the documented encoding,
        the daemon stopped; the new head."""
        self.stop_daemon()
        owner = os.stat(self.db)
        detail = json.dumps({"tool": "files.read_file",
                             "arguments": {"path": "/srv/" + "x" *
                                           detail_size}},
                            separators=(",", ":"))
        with sqlite3.connect(self.db) as conn:
            last_id, prev = conn.execute("SELECT last_id, last_hash FROM "
                                         "audit_checkpoint").fetchone()
            rows = []
            for i in range(last_id + 1, last_id + n + 1):
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
        return prev

    def test_long_trail_pages(self):
        """More rows than one answer holds: export pages through them, and
        rows written in Python from the documented encoding verify."""
        self.users("a")
        prev = self.append_rows(12000)
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
        # a user within a tenant: acme's alice has them, beta's none
        out = self.b.ctl("audit", "show", "-n", "3", "-u",
                         "acme/alice").stdout.splitlines()
        self.assertEqual([l.split()[0] for l in out[1:]],
                         ["11999", "12000", "12001"])
        out = self.b.ctl("audit", "show", "-u",
                         "beta/alice").stdout.splitlines()
        self.assertEqual(out[1:], [])

    def test_verify_leaves_the_broker_serving(self):
        """`audit verify` reads a long trail in steps that take turns with
        everything else: while it reads 300,000 rows, requests are
        answered and users added; it reads the rows there when it began,
        and the next verify has the users' rows too."""
        r = self.b.ctl("user", "add", "-r", "analyst", "a")
        key = r.stdout.strip().splitlines()[-1]
        self.append_rows(300000, detail_size=40)
        verify = subprocess.Popen([MCPBROKERCTL, "-s", self.b.sock, "audit",
                                   "verify"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.addCleanup(verify.kill)
        answered = added = 0
        while verify.poll() is None:
            status, _, _ = self.b.request(
                "GET", "/auth/session", None,
                {"Authorization": "Bearer " + key})
            self.assertEqual(status, 200)
            if verify.poll() is None:
                answered += 1
            if answered % 20 == 1 and added < 3:
                self.b.ctl("user", "add", "u%d" % added)
                added += 1
        out, err = verify.communicate()
        self.assertEqual(verify.returncode, 0, out + err)
        # the rows there when it began: the first user's, the 300,000,
        # and those of the users added before the walk began, if any
        m = re.match(r"^audit trail OK: (\d+) rows, head ", out)
        self.assertIsNotNone(m, out)
        self.assertTrue(300001 <= int(m.group(1)) <= 300001 + added, out)
        # with the walk in one go, none (the loop waits for it)
        self.assertGreaterEqual(answered, 5, "requests answered while "
                                "the trail was being read")
        self.assertGreaterEqual(added, 1)
        r = self.verify()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("audit trail OK: %d rows" % (300001 + added),
                      r.stdout)

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


# -- signed checkpoints ---------------------------------------------------

def genkey(directory):
    path = os.path.join(directory, "audit.key")
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out",
                    path], check=True, capture_output=True)
    os.chmod(path, 0o600)
    return path


def sqlite_cli(db, sql):
    """The sqlite3 command line tool, as an intruder would use it; the
    files stay owned by the daemon's user."""
    owner = os.stat(db)
    subprocess.run(["sqlite3", db, sql], check=True, capture_output=True,
                   text=True)
    state = os.path.dirname(db)
    for name in os.listdir(state):
        os.chown(os.path.join(state, name), owner.st_uid, owner.st_gid)


CHECKPOINT_TEXT = ("mcpbroker-audit-checkpoint-v1\nlast_id={last_id}\n"
                   "head={head}\nrows={rows}\ntime={time}\n")


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.key = genkey(self.tmp)
        self.b = Broker('audit { signing-key-file "%s" }' % self.key)
        self.addCleanup(self.b.stop)
        self.b.start()
        self.db = os.path.join(self.b.dir, "state", "mcpbroker.db")

    def users(self, *names):
        for name in names:
            self.b.ctl("user", "add", name)

    def checkpoint(self):
        r = self.b.ctl("audit", "checkpoint")
        path = os.path.join(self.tmp, "checkpoint.json")
        with open(path, "w") as f:
            f.write(r.stdout)
        return json.loads(r.stdout), path

    def restart(self):
        self.b.signal(signal.SIGTERM)
        self.b.wait_exit()
        self.b._log_thread.join(timeout=5)
        self.b.proc.stderr.close()

    def test_signature_is_the_documented_one(self):
        """openssl alone checks a checkpoint, from the documented bytes
        and the public half of the configured key."""
        self.users("a", "b", "c")
        cp, _ = self.checkpoint()
        self.assertEqual(sorted(cp), ["head", "last_id", "public_key", "rows",
                                      "signature", "time", "version"])
        self.assertEqual((cp["version"], cp["last_id"], cp["rows"]),
                         (1, 3, 3))
        with sqlite3.connect(self.db) as conn:
            head = conn.execute("SELECT hash FROM audit WHERE id = 3"
                                ).fetchone()[0]
        self.assertEqual(cp["head"], head.hex())
        self.assertRegex(cp["time"],
                         r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        ours = subprocess.run(["openssl", "pkey", "-in", self.key, "-pubout"],
                              check=True, capture_output=True,
                              text=True).stdout
        pub = ("-----BEGIN PUBLIC KEY-----\n%s\n-----END PUBLIC KEY-----\n"
               % cp["public_key"])
        self.assertEqual(pub, ours)
        files = {"pub.pem": pub.encode(),
                 "msg": CHECKPOINT_TEXT.format(**cp).encode(),
                 "sig": base64.b64decode(cp["signature"])}
        for name, data in files.items():
            with open(os.path.join(self.tmp, name), "wb") as f:
                f.write(data)
        r = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin",
                            "-inkey", "pub.pem", "-rawin", "-in", "msg",
                            "-sigfile", "sig"], cwd=self.tmp,
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("Signature Verified Successfully", r.stdout)

    def test_truncation_is_found(self):
        self.users("u1", "u2", "u3", "u4")
        cp, path = self.checkpoint()
        r = self.b.ctl("audit", "verify", "--checkpoint", path)
        self.assertEqual(r.stdout.splitlines()[1], "checkpoint OK: row 4 of "
                         "%s is in the trail as signed" % cp["time"])
        self.users("u5", "u6")
        self.assertEqual(self.b.ctl("audit", "verify", "--checkpoint",
                                    path).returncode, 0)
        # The tail cut, and the internal checkpoint made to agree: the
        # chain alone has nothing to object to.
        self.restart()
        sqlite_cli(self.db,
                   "DROP TRIGGER audit_no_delete;"
                   "DELETE FROM audit WHERE id > 2;"
                   "UPDATE audit_checkpoint SET last_id = 2, last_hash = "
                   "(SELECT hash FROM audit WHERE id = 2);")
        self.b.start()
        r = self.b.ctl("audit", "verify", check=False)
        self.assertEqual(r.returncode, 0, r.stdout)
        r = self.b.ctl("audit", "verify", "--checkpoint", path, check=False)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(r.stdout.splitlines(), [
            "audit trail OK: 2 rows, head %s" % self.rows_head(),
            "checkpoint FAILED: the trail was truncated: the checkpoint "
            "vouches for row 4, the trail ends at row 2"])
        # Refilled with rows of the intruder's making: not the ones signed.
        self.users("x1", "x2")
        r = self.b.ctl("audit", "verify", "--checkpoint", path, check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("checkpoint FAILED: row 4 is not the row the "
                      "checkpoint vouches for: the trail was rewritten",
                      r.stdout)

    def rows_head(self):
        with sqlite3.connect(self.db) as conn:
            return conn.execute("SELECT hash FROM audit ORDER BY id DESC "
                                "LIMIT 1").fetchone()[0].hex()

    def test_altered_checkpoint_is_refused(self):
        self.users("a", "b")
        cp, path = self.checkpoint()
        cp["last_id"] = 1
        with open(path, "w") as f:
            json.dump(cp, f)
        r = self.b.ctl("audit", "verify", "--checkpoint", path, check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("checkpoint FAILED: the signature does not verify: the "
                      "checkpoint was altered", r.stdout)
        with open(path, "w") as f:
            f.write("not json")
        r = self.b.ctl("audit", "verify", "--checkpoint", path, check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("not a checkpoint", r.stderr)

    def test_key_rotation_on_reload(self):
        """A new key signs from the reload on; an old checkpoint then
        needs the old key, and says so."""
        self.users("a")
        _, path = self.checkpoint()
        os.unlink(self.key)
        genkey(self.tmp)
        self.b.ctl("reload")
        self.b.wait_log(r"configuration reloaded")
        r = self.b.ctl("audit", "verify", "--checkpoint", path, check=False)
        self.assertIn("checkpoint FAILED: signed by another key than the "
                      "configured signing-key-file", r.stdout)
        cp, path = self.checkpoint()
        self.assertEqual(self.b.ctl("audit", "verify", "--checkpoint",
                                    path).returncode, 0)

    def test_bad_key_stops_the_start(self):
        with open(self.key, "w") as f:
            f.write("-----BEGIN PRIVATE KEY-----\nAAAA\n"
                    "-----END PRIVATE KEY-----\n")
        r = subprocess.run([MCPBROKER, "-n", "-f", self.b.conf],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn('signing-key-file "%s": not an unencrypted Ed25519 '
                      'private key in PEM' % self.key, r.stderr)


class CheckpointWithoutKeyTest(unittest.TestCase):
    def test_refused_with_a_reason(self):
        b = Broker("")
        self.addCleanup(b.stop)
        b.start()
        r = b.ctl("audit", "checkpoint", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "")
        self.assertIn("no signing key is configured: add audit { "
                      "signing-key-file", r.stderr)


# -- tool calls in a chat: masking, filters, export formats --------------

# Everything a log collector splits on, and what Python's splitlines does.
HOSTILE_TEXT = ('line1\nline2\r\n<13>1 2026-01-01T00:00:00Z forged - - - - '
                'CEF:0|x|y|1|z|n|9|act=allow a=b ] [x@1 k="v"] "q" \\ '
                '\u2028 \x85 \x7f end')


def parse_syslog(line):
    """RFC 5424 with structured data: (pri, header fields, [(sd-id,
    {name: value})], msg).  PARAM-VALUE escapes are \\" \\\\ \\]."""
    m = re.match(r"<(\d+)>1 (\S+) (\S+) (\S+) (\S+) (\S+) ", line)
    assert m, line
    pos, sd = m.end(), []
    while line[pos] == "[":
        end = pos + 1
        while line[end] not in " ]":
            end += 1
        sd_id, params, pos = line[pos + 1:end], {}, end
        while line[pos] == " ":
            eq = line.index("=", pos)
            name = line[pos + 1:eq]
            assert line[eq + 1] == '"', line
            pos, value = eq + 2, []
            while line[pos] != '"':
                if line[pos] == "\\" and line[pos + 1] in '"\\]':
                    pos += 1
                value.append(line[pos])
                pos += 1
            params[name] = "".join(value)
            pos += 1
        assert line[pos] == "]", line
        sd.append((sd_id, params))
        pos += 1
    assert line[pos] == " ", line
    return int(m.group(1)), m.groups()[1:], sd, line[pos + 1:]


def parse_cef(line):
    """CEF: seven header fields split on unescaped |, then key=value
    pairs in which \\= \\\\ \\n \\r are escapes."""
    assert line.startswith("CEF:"), line
    fields, cur, i = [], [], 4
    while len(fields) < 7:
        c = line[i]
        if c == "\\":
            cur.append(line[i + 1])
            i += 2
            continue
        if c == "|":
            fields.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    ext, chars, j = line[i:], [], 0
    while j < len(ext):         # (char, escaped)
        if ext[j] == "\\":
            chars.append(({"n": "\n", "r": "\r"}.get(ext[j + 1],
                                                     ext[j + 1]), True))
            j += 2
        else:
            chars.append((ext[j], False))
            j += 1
    keys = [k for k, (c, esc) in enumerate(chars) if c == "=" and not esc]
    pairs = {}
    for n, k in enumerate(keys):
        start = k
        while start > 0 and not (chars[start - 1][0] == " " and
                                 not chars[start - 1][1]):
            start -= 1
        end = len(chars)
        if n + 1 < len(keys):
            end = keys[n + 1]
            while not (chars[end - 1][0] == " " and not chars[end - 1][1]):
                end -= 1
            end -= 1
        key = "".join(c for c, _ in chars[start:k])
        pairs[key] = "".join(c for c, _ in chars[k + 1:end])
    return fields, pairs


class AuditChatTest(unittest.TestCase):
    """A chat whose model calls a real (Python) MCP server's echo tool."""

    @classmethod
    def setUpClass(cls):
        cls.llm = FakeLLM()
        os.environ["FAKE_LLM_KEY"] = KEY
        cls.b = Broker(
            'auth { api-keys }\n'
            'provider "llm" { %s }\n'
            'server "echo" { command "python3" "%s" "ok" }\n'
            'audit { mask "password" "*_key" }\n'
            'deny tool "echo.echo" where text equals "forbidden"\n'
            'allow tool "*"\n' % (PROVIDERS["openai"] % cls.llm.port,
                                  HOSTILE))
        cls.b.start()
        cls.key = cls.b.ctl("user", "add", "-r", "admin",
                            "alice").stdout.split()[-1]
        cls.auth = {"Authorization": "Bearer " + cls.key}
        status, _, _ = cls.b.request("POST", "/llmchat/connect",
                                     '{"provider":"llm"}', cls.auth)
        assert status == 200
        cls.db = os.path.join(cls.b.dir, "state", "mcpbroker.db")

    @classmethod
    def tearDownClass(cls):
        cls.b.stop()
        cls.llm.stop()

    def call(self, *argument_sets):
        self.llm.reset()
        self.llm.script({"tool_calls": [{"name": "echo__echo",
                                         "arguments": a}
                                        for a in argument_sets]},
                        {"text": "done"})
        status, _, data = self.b.request(
            "POST", "/llmchat/chat",
            json.dumps({"message": "go", "streaming": False}),
            dict(self.auth, **{"Content-Type": "application/json"}),
            timeout=30)
        self.assertEqual(status, 200, data)
        return json.loads(data)

    def export(self, fmt):
        return self.b.ctl("audit", "export", "--format", fmt).stdout

    def rows(self):
        return [json.loads(line) for line in self.export("jsonl").split("\n")
                if line]

    def test_masked_arguments(self):
        args = {"text": "hello", "password": "hunter2",
                "nested": {"API_KEY": "k-123", "db_password": "visible",
                           "list": [{"Password": ["also", "hidden"]}]}}
        doc = self.call(args)
        # The tool got the real arguments.
        self.assertEqual(doc["tool_invocations"][0]["output"], "hello")
        calls = [r for r in self.rows() if r["kind"] == "tool_call"
                 and r["detail"]["arguments"].get("text") == "hello"]
        self.assertEqual(len(calls), 1)
        d = calls[0]["detail"]
        self.assertEqual(d["arguments"], {
            "text": "hello", "password": "***",
            "nested": {"API_KEY": "***", "db_password": "visible",
                       "list": [{"Password": "***"}]}})
        # The digest is of the real arguments, in the row's compact form:
        # put the values back and it matches.
        self.assertEqual(d["arguments_sha256"], hashlib.sha256(json.dumps(
            args, separators=(",", ":")).encode()).hexdigest())
        with sqlite3.connect(self.db) as conn:
            leaked = conn.execute("SELECT count(*) FROM audit WHERE detail "
                                  "LIKE '%hunter2%' OR detail LIKE "
                                  "'%k-123%'").fetchone()[0]
        self.assertEqual(leaked, 0)
        # Its outcome row names it, and follows it.
        results = [r for r in self.rows() if r["kind"] == "tool_result"
                   and r["detail"]["intent"] == calls[0]["id"]]
        self.assertEqual(len(results), 1)
        self.assertEqual(results[0]["detail"]["outcome"], "ok")
        self.assertGreater(results[0]["id"], calls[0]["id"])
        self.assertIn("audit trail OK", self.b.ctl("audit", "verify").stdout)

    def test_operator_calls_are_recorded_before_they_run(self):
        """`mcpbrokerctl server call` skips policy; it is on record."""
        out = self.b.ctl("server", "call", "-u", "bob", "echo", "echo",
                         '{"text": "by hand", "password": "pw-1"}').stdout
        self.assertIn("by hand", out)
        rows = [r for r in self.rows() if r["kind"] == "admin" and
                r["detail"].get("op") == "server_call"]
        # bob is no local user: the tenant of users made without one
        self.assertEqual(rows[-1]["detail"], {
            "op": "server_call", "server": "echo", "tool": "echo",
            "as_user": "default/bob",
            "arguments": {"text": "by hand", "password": "***"}})

    def test_parallel_calls_are_recorded_in_order(self):
        """Calls of one round are decided together and committed in one
        batch: every intent precedes every outcome of the round."""
        doc = self.call(*[{"text": "p%d" % i} for i in range(6)])
        self.assertEqual(sorted(i["output"] for i in doc["tool_invocations"]),
                         ["p%d" % i for i in range(6)])
        rows = self.rows()
        intents = [r for r in rows if r["kind"] == "tool_call" and
                   r["detail"]["arguments"]["text"].startswith("p")]
        self.assertEqual([r["detail"]["arguments"]["text"] for r in intents],
                         ["p%d" % i for i in range(6)])
        ids = [r["id"] for r in intents]
        self.assertEqual(ids, list(range(ids[0], ids[0] + 6)))
        outcomes = [r for r in rows if r["kind"] == "tool_result" and
                    r["detail"]["intent"] in ids]
        self.assertEqual(len(outcomes), 6)
        self.assertGreater(min(r["id"] for r in outcomes), max(ids))

    def test_filters(self):
        self.call({"text": "filter-me"}, {"text": "forbidden"})
        out = self.b.ctl("audit", "show", "--tool", "echo.*", "-n",
                         "10000").stdout
        self.assertIn('"text":"filter-me"', out)
        kinds = {line.split()[2] for line in out.splitlines()[1:]}
        self.assertEqual(kinds, {"tool_call", "tool_result"})
        out = self.b.ctl("audit", "show", "--decision",
                         "deny").stdout.splitlines()[1:]
        self.assertTrue(out)
        for line in out:
            self.assertIn('"decision":"deny"', line)
        self.assertIn('"text":"forbidden"', out[-1])
        out = self.b.ctl("audit", "show", "--tool", "other.*").stdout
        self.assertEqual(len(out.splitlines()), 1)
        out = self.b.ctl("audit", "show", "--since", "1h", "--until",
                         "2100-01-01", "--tool", "echo.echo").stdout
        self.assertIn("filter-me", out)
        out = self.b.ctl("audit", "show", "--until", "2000-01-01").stdout
        self.assertEqual(len(out.splitlines()), 1)
        r = self.b.ctl("audit", "show", "--since", "yesterday", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("--since yesterday: expected ISO 8601", r.stderr)
        r = self.b.ctl("audit", "show", "--decision", "maybe", check=False)
        self.assertEqual(r.returncode, 1)
        # The same over the API.
        status, _, data = self.b.request(
            "GET", "/api/v1/audit?tool=echo.ech%3F&decision=deny&since=1h",
            headers=self.auth)
        self.assertEqual(status, 200, data)
        rows = json.loads(data)["rows"]
        self.assertTrue(rows)
        self.assertEqual({(r["kind"], r["detail"]["decision"]) for r in rows},
                         {("tool_call", "deny")})
        status, _, data = self.b.request(
            "GET", "/api/v1/audit?since=2000-01-01T00:00:00Z&until=1999",
            headers=self.auth)
        self.assertEqual((status, json.loads(data)["rows"]), (200, []))
        status, _, _ = self.b.request("GET", "/api/v1/audit?since=soon",
                                      headers=self.auth)
        self.assertEqual(status, 400)
        # A filter that cannot be applied is an error, never ignored.
        for query, why in (("tool=" + "e" * 300, "longer than 256"),
                           ("tools=echo.*", 'unknown query parameter '
                            '"tools"'),
                           ("limit=ten", "limit")):
            status, _, data = self.b.request("GET", "/api/v1/audit?" + query,
                                             headers=self.auth)
            self.assertEqual(status, 400, query)
            self.assertIn(why, json.loads(data)["error"]["message"])

    def test_exports_resist_log_injection(self):
        hostile = {"text": HOSTILE_TEXT, 'k|e=y]"\n': HOSTILE_TEXT}
        self.call(hostile)
        rows = self.rows()
        self.assertTrue(any(r["detail"].get("arguments") == hostile
                            for r in rows if r["kind"] == "tool_call"))
        for fmt in ("jsonl", "syslog", "cef"):
            out = self.export(fmt)
            self.assertTrue(out.endswith("\n"))
            lines = out[:-1].split("\n")
            # One record per line, whatever a collector splits lines on.
            self.assertEqual(len(lines), len(rows), fmt)
            self.assertEqual(out.splitlines(), lines, fmt)
            self.assertNotIn("\r", out)
            for row, line in zip(rows, lines):
                with self.subTest(fmt=fmt, id=row["id"]):
                    self.check_record(fmt, row, line)

    def check_record(self, fmt, row, line):
        if fmt == "jsonl":
            self.assertEqual(json.loads(line), row)
        elif fmt == "syslog":
            pri, header, sd, msg = parse_syslog(line)
            self.assertEqual(pri // 8, 13)
            self.assertEqual(header[2], "mcpbroker")
            self.assertEqual(header[4], row["kind"])
            self.assertEqual(json.loads(msg), row["detail"])
            self.assertEqual(sd[0][0], "mcpbroker@32473")
            params = sd[0][1]
            self.assertEqual(params["id"], str(row["id"]))
            self.assertEqual(params["hash"], row["hash"])
            self.assertEqual(params.get("user"), row["user"])
            self.assertEqual(sd[1][0], "detail@32473")
            for k, v in sd[1][1].items():
                self.assertEqual(v, str(row["detail"][k]))
        else:
            fields, ext = parse_cef(line)
            self.assertEqual(fields[:3], ["0", "mcpbroker", "mcpbroker"])
            self.assertEqual(fields[4], row["kind"])
            self.assertEqual(json.loads(ext["msg"]), row["detail"])
            self.assertEqual(ext["externalId"], str(row["id"]))
            self.assertEqual(ext["rt"], str(row["ts"]))
            self.assertEqual(ext["cs5"], row["hash"])
            if row["user"] is not None:
                self.assertEqual(ext["suser"], row["user"])
            if row["kind"] == "tool_call" and "server" in row["detail"]:
                self.assertEqual(ext["cs2"], "echo.echo")
                self.assertEqual(ext["act"], row["detail"]["decision"])


if __name__ == "__main__":
    unittest.main()
