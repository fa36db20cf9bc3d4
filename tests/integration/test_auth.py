"""Users and API keys: made with mcpbrokerctl, stored hashed, required by
the API when `auth { api-keys }` is configured."""
import json
import os
import sqlite3
import unittest

from broker import Broker


class ApiKeyTest(unittest.TestCase):
    def setUp(self):
        self.b = Broker('auth { api-keys }\n'
                        'provider "llm" { type ollama base-url '
                        '"http://127.0.0.1:1" model "m" }\n'
                        'server "files" { command "true" }\n'
                        'deny tool "files.write_*"\n'
                        'allow role "analyst" tool "files.*"\n')
        self.addCleanup(self.b.stop)
        self.b.start(wait_ready=False)

    def add(self, name, *opts):
        r = self.b.ctl("user", "add", *opts, name)
        key = r.stdout.strip().splitlines()[-1]
        self.assertRegex(key, r"^mcpb_[A-Za-z0-9_-]{43}$")
        return key

    def status(self, path, key=None):
        headers = {"Authorization": "Bearer " + key} if key else {}
        status, h, data = self.b.request("GET", path, headers=headers)
        return status, h, json.loads(data)

    def test_key_required_and_checked(self):
        key = self.add("alice", "-r", "analyst", "-t", "acme")
        status, h, doc = self.status("/llmchat/status/alice")
        self.assertEqual(status, 401)
        self.assertEqual(h.get("WWW-Authenticate"), "Bearer")
        status, _, doc = self.status("/llmchat/status/alice", key)
        self.assertEqual(status, 200)
        self.assertEqual(doc, {"user_id": "alice", "connected": False})
        status, _, _ = self.status("/llmchat/status/alice", key[:-1] + "x")
        self.assertEqual(status, 401)
        status, _, _ = self.status("/llmchat/status/alice", "garbage")
        self.assertEqual(status, 401)

    def test_identity_comes_from_the_key(self):
        alice = self.add("alice")
        self.add("bob")
        status, _, doc = self.status("/llmchat/status/bob", alice)
        self.assertEqual(status, 403)

    def test_rotation_and_deletion(self):
        old = self.add("carol")
        new = self.b.ctl("user", "key", "carol").stdout.strip().splitlines(
        )[-1]
        self.assertNotEqual(old, new)
        self.assertEqual(self.status("/llmchat/status/carol", old)[0], 401)
        self.assertEqual(self.status("/llmchat/status/carol", new)[0], 200)
        self.b.ctl("user", "del", "carol")
        self.assertEqual(self.status("/llmchat/status/carol", new)[0], 401)

    def test_list_and_errors(self):
        self.add("dave", "-r", "admin")
        out = self.b.ctl("user", "list").stdout
        self.assertRegex(out, r"dave\s+default\s+admin")
        r = self.b.ctl("user", "add", "dave", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("exists already", r.stderr)
        r = self.b.ctl("user", "add", "bad name", check=False)
        self.assertEqual(r.returncode, 1)
        r = self.b.ctl("user", "del", "nobody-here", check=False)
        self.assertEqual(r.returncode, 1)
        # A bad admin request is answered, not fatal to the daemon.
        self.assertEqual(self.b.get("/healthz")[0], 200)

    def test_many_bad_keys_are_rate_limited_and_a_good_key_still_works(self):
        good = self.add("gail")
        codes = []
        for i in range(1000):
            codes.append(self.status("/llmchat/status/gail",
                                     "mcpb_bad%040d" % i)[0])
            if i % 100 == 0:
                self.assertEqual(self.status("/llmchat/status/gail",
                                             good)[0], 200)
        self.assertEqual(codes[:10], [401] * 10)
        self.assertEqual(set(codes[20:]), {429})
        self.assertEqual(self.status("/llmchat/status/gail", good)[0], 200)
        # The trail got the first refusals, not a thousand rows.
        rows = self.b.ctl("audit", "show", "-n", "2000", "-k",
                          "auth").stdout.count("unknown API key")
        self.assertGreaterEqual(rows, 10)
        self.assertLess(rows, 30)

    def test_policy_explain(self):
        self.add("ana", "-r", "analyst")
        out = self.b.ctl("policy", "explain", "-u", "ana", "-t",
                         "files.read_file").stdout
        self.assertIn("decision: allow", out)
        out = self.b.ctl("policy", "explain", "-u", "ana", "-t",
                         "files.write_file").stdout
        self.assertIn("decision: deny", out)
        r = self.b.ctl("policy", "explain", "-u", "ghost", "-t", "files.x",
                       check=False)
        self.assertEqual(r.returncode, 1)

    def test_audit_api_for_admins_only(self):
        root = self.add("root", "-r", "admin")
        boss = self.add("boss", "-r", "tenant-admin", "-t", "acme")
        plain = self.add("pat", "-t", "acme")
        self.status("/llmchat/status/x", "mcpb_" + "0" * 43)   # auth row
        status, _, doc = self.status("/api/v1/audit?kind=admin&limit=2",
                                     root)
        self.assertEqual(status, 200, doc)
        self.assertEqual(len(doc["rows"]), 2)
        self.assertTrue(all(r["kind"] == "admin" for r in doc["rows"]))
        status, _, doc = self.status("/api/v1/audit?kind=auth", root)
        self.assertEqual(len(doc["rows"]), 1)
        # A tenant-admin sees only rows of their tenant: none of these
        # (administration and refused keys carry no tenant).
        status, _, doc = self.status("/api/v1/audit", boss)
        self.assertEqual(status, 200)
        self.assertEqual(doc["rows"], [])
        self.assertEqual(self.status("/api/v1/audit", plain)[0], 403)

    def test_keys_are_stored_hashed_and_never_logged(self):
        key = self.add("erin")
        db = os.path.join(self.b.dir, "state", "mcpbroker.db")
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT key_id, length(key_hash) FROM users "
                                "WHERE name = 'erin'").fetchall()
        self.assertEqual(rows, [(key[5:17], 32)])
        for name in os.listdir(os.path.dirname(db)):
            with open(os.path.join(os.path.dirname(db), name), "rb") as f:
                self.assertNotIn(key.encode(), f.read())
        self.assertNotIn(key, self.b.log())


if __name__ == "__main__":
    unittest.main()
