"""The console's admin API: users and keys (/api/v1/admin/users) and
servers (/api/v1/admin/servers). Who may do what (401 without a key, 403
for other roles, a tenant-admin confined to their tenant and to users
without admin roles), the audit rows naming the caller, and CSRF for
cookie sessions."""
import json
import os
import shutil
import sqlite3
import tempfile
import unittest

from broker import Broker
from mcpfixtures import FIXTURES

BASE = ('provider "llm" { type ollama base-url "http://127.0.0.1:1" '
        'model "m" }\n')
USERS = "/api/v1/admin/users"


class AdminApiTest(unittest.TestCase):
    def setUp(self):
        self.b = Broker("auth { api-keys }\n" + BASE)
        self.addCleanup(self.b.stop)
        self.b.start(wait_ready=False)
        self.origin = "http://127.0.0.1:%d" % self.b.port
        self.root = self.add("root", "-r", "admin", "-t", "ops")
        self.ta = self.add("tad", "-r", "tenant-admin", "-t", "acme")
        self.dev = self.add("dev1", "-r", "dev", "-t", "acme")
        self.other = self.add("zed", "-r", "dev", "-t", "globex")

    def add(self, name, *opts):
        r = self.b.ctl("user", "add", *opts, name)
        return r.stdout.strip().splitlines()[-1]

    def call(self, method, path, body=None, key=None, cookie=None,
             csrf=None):
        h = {}
        if key is not None:
            h["Authorization"] = "Bearer " + key
        if cookie is not None:
            h["Cookie"] = "mcpb_session=" + cookie
            h["Origin"] = self.origin
        if csrf is not None:
            h["X-CSRF-Token"] = csrf
        if body is not None:
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        status, _, data = self.b.request(method, path, body=body, headers=h)
        return status, json.loads(data) if data else None

    def admin_rows(self):
        conn = sqlite3.connect(os.path.join(self.b.dir, "state",
                                            "mcpbroker.db"))
        try:
            rows = conn.execute("SELECT user, tenant, detail FROM audit "
                                "WHERE kind = 'admin' ORDER BY id").fetchall()
        finally:
            conn.close()
        return [(u, t, json.loads(d)) for u, t, d in rows]

    def names(self, key):
        status, doc = self.call("GET", USERS, key=key)
        self.assertEqual(status, 200, doc)
        return sorted(u["name"] for u in doc["users"])

    def test_unauthenticated_and_other_roles(self):
        for method, path, body in (("GET", USERS, None),
                                   ("POST", USERS, {"name": "x"}),
                                   ("POST", USERS + "/dev1/key", None),
                                   ("DELETE", USERS + "/dev1", None),
                                   ("GET", "/api/v1/admin/servers", None)):
            status, _ = self.call(method, path, body)
            self.assertEqual(status, 401, path)
            status, doc = self.call(method, path, body, key=self.dev)
            self.assertEqual(status, 403, (method, path, doc))
            self.assertEqual(doc["error"]["code"], "forbidden")
        # servers are for admins only; a tenant-admin is refused
        status, _ = self.call("GET", "/api/v1/admin/servers", key=self.ta)
        self.assertEqual(status, 403)
        status, _ = self.call("PUT", USERS, key=self.root)
        self.assertIn(status, (405, 501))
        status, _ = self.call("GET", USERS + "?tenant=x", key=self.root)
        self.assertEqual(status, 400)

    def test_admin_manages_everyone_and_the_trail_says_who(self):
        self.assertEqual(self.names(self.root),
                         ["dev1", "root", "tad", "zed"])
        status, doc = self.call("POST", USERS, {
            "name": "new.one@x", "roles": ["analyst", "tenant-admin"],
            "tenant": "globex"}, key=self.root)
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["name"], "new.one@x")
        self.assertEqual(doc["tenant"], "globex")
        self.assertEqual(doc["roles"], "analyst,tenant-admin")
        key = doc["key"]
        self.assertTrue(key.startswith("mcpb_"))
        status, doc = self.call("GET", "/auth/session", key=key)
        self.assertEqual(status, 200)
        self.assertEqual(doc["user"], "new.one@x")
        self.assertEqual(doc["roles"], ["analyst", "tenant-admin"])
        # an existing name, bad names and roles
        status, doc = self.call("POST", USERS, {"name": "dev1"},
                                key=self.root)
        self.assertEqual(status, 409, doc)
        for body in ({"name": ""}, {"name": "a b"}, {"name": "x" * 65},
                     {"name": "ok", "roles": "admin"},
                     {"name": "ok", "roles": ["a,b"]},
                     {"name": "ok", "roles": [1]},
                     {"name": "ok", "tenant": "t/1"}, {}):
            status, doc = self.call("POST", USERS, body, key=self.root)
            self.assertEqual(status, 422, (body, doc))
        self.assertNotIn("ok", self.names(self.root))
        # rotate: the old key stops working
        status, doc = self.call("POST", USERS + "/new.one@x/key",
                                key=self.root)
        self.assertEqual(status, 200, doc)
        self.assertNotEqual(doc["key"], key)
        self.assertEqual(self.call("GET", "/auth/session", key=key)[0], 401)
        key = doc["key"]
        self.assertEqual(self.call("GET", "/auth/session", key=key)[0], 200)
        # delete, and the key that just worked does not; not oneself;
        # unknown names
        status, doc = self.call("DELETE", USERS + "/new.one@x",
                                key=self.root)
        self.assertEqual(status, 200, doc)
        self.assertEqual(self.call("GET", "/auth/session", key=key)[0], 401)
        status, doc = self.call("DELETE", USERS + "/root", key=self.root)
        self.assertEqual(status, 409, doc)
        self.assertEqual(doc["error"]["code"], "self")
        for path in (USERS + "/nobody", USERS + "/nobody/key"):
            method = "DELETE" if path.endswith("nobody") else "POST"
            self.assertEqual(self.call(method, path, key=self.root)[0], 404)
        rows = [r for r in self.admin_rows()
                if r[2].get("name") == "new.one@x"]
        self.assertEqual([r[2]["op"] for r in rows],
                         ["user_add", "user_key", "user_del"])
        for user, tenant, detail in rows:
            self.assertEqual((user, tenant, detail["by"]),
                             ("root", "ops", "root"))
        self.assertEqual(rows[0][2]["tenant"], "globex")
        self.assertEqual(rows[0][2]["roles"], "analyst,tenant-admin")
        # the keys never reach the trail
        self.assertNotIn(key, json.dumps(self.admin_rows()))
        # the control socket's rows still name nobody
        ctl_rows = [r for r in self.admin_rows() if r[2].get("name") == "zed"]
        self.assertEqual(ctl_rows[0][:2], (None, None))
        self.assertNotIn("by", ctl_rows[0][2])

    def test_tenant_admin_is_confined(self):
        self.assertEqual(self.names(self.ta), ["dev1", "tad"])
        # creates in their own tenant by default
        status, doc = self.call("POST", USERS, {"name": "ann",
                                                "roles": ["dev"]},
                                key=self.ta)
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["tenant"], "acme")
        self.assertIn("ann", self.names(self.ta))
        # no admin roles, no other tenant
        for body in ({"name": "boss", "roles": ["admin"]},
                     {"name": "boss", "roles": ["dev", "tenant-admin"]},
                     {"name": "boss", "roles": ["admin"],
                      "tenant": "globex"},
                     {"name": "boss", "tenant": "globex"}):
            status, doc = self.call("POST", USERS, body, key=self.ta)
            self.assertEqual(status, 403, (body, doc))
        self.assertNotIn("boss", self.names(self.root))
        # another tenant's user is not there for them
        for method, path in (("POST", USERS + "/zed/key"),
                             ("DELETE", USERS + "/zed"),
                             ("POST", USERS + "/root/key")):
            status, _ = self.call(method, path, key=self.ta)
            self.assertEqual(status, 404, path)
        # a tenant-admin of their own tenant is an admin's to manage
        self.add("tad2", "-r", "tenant-admin", "-t", "acme")
        self.add("acmeroot", "-r", "admin", "-t", "acme")
        for name in ("tad2", "acmeroot"):
            status, _ = self.call("POST", USERS + "/%s/key" % name,
                                  key=self.ta)
            self.assertEqual(status, 403, name)
            status, _ = self.call("DELETE", USERS + "/" + name, key=self.ta)
            self.assertEqual(status, 403, name)
        # their own tenant's plain users they may rotate and delete
        status, doc = self.call("POST", USERS + "/ann/key", key=self.ta)
        self.assertEqual(status, 200, doc)
        status, doc = self.call("DELETE", USERS + "/ann", key=self.ta)
        self.assertEqual(status, 200, doc)
        self.assertEqual(self.call("DELETE", USERS + "/tad", key=self.ta)[0],
                         409)
        rows = [r for r in self.admin_rows() if r[2].get("name") == "ann"]
        self.assertEqual([(r[0], r[1], r[2]["op"]) for r in rows],
                         [("tad", "acme", "user_add"),
                          ("tad", "acme", "user_key"),
                          ("tad", "acme", "user_del")])
        # their tenant's audit view shows what they did
        status, doc = self.call("GET", "/api/v1/audit?kind=admin",
                                key=self.ta)
        self.assertEqual(status, 200)
        self.assertEqual(len([r for r in doc["rows"]
                              if r["detail"].get("name") == "ann"]), 3)
        # a user within a tenant: theirs, or nothing of another tenant's
        for who, n in (("acme/tad", 3), ("tad", 3), ("globex/tad", 0)):
            status, doc = self.call("GET", "/api/v1/audit?kind=admin&user=" +
                                    who, key=self.ta)
            self.assertEqual(status, 200)
            self.assertEqual(len([r for r in doc["rows"]
                                  if r["detail"].get("name") == "ann"]), n,
                             who)
        status, doc = self.call("GET", "/api/v1/audit?kind=admin&user="
                                "globex/tad", key=self.root)
        self.assertEqual((status, doc["rows"]), (200, []))

    def test_csrf_for_cookie_sessions(self):
        status, h, data = self.b.request(
            "POST", "/auth/login", body=json.dumps({"api_key": self.root}),
            headers={"Content-Type": "application/json"})
        sid = h["Set-Cookie"].split(";")[0].split("=", 1)[1]
        csrf = json.loads(data)["csrf_token"]
        status, doc = self.call("GET", USERS, cookie=sid)
        self.assertEqual(status, 200, doc)
        for method, path, body in (("POST", USERS, {"name": "c1"}),
                                   ("POST", USERS + "/dev1/key", None),
                                   ("DELETE", USERS + "/dev1", None)):
            for token in (None, "x" * 43):
                status, doc = self.call(method, path, body, cookie=sid,
                                        csrf=token)
                self.assertEqual(status, 403, (path, doc))
                self.assertEqual(doc["error"]["code"], "csrf")
        self.assertEqual(self.names(self.root),
                         ["dev1", "root", "tad", "zed"])
        status, doc = self.call("POST", USERS, {"name": "c1"}, cookie=sid,
                                csrf=csrf)
        self.assertEqual(status, 200, doc)
        status, doc = self.call("DELETE", USERS + "/c1", cookie=sid,
                                csrf=csrf)
        self.assertEqual(status, 200, doc)

    def test_servers_view(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        os.chmod(d, 0o755)
        tools = os.path.join(d, "tools.json")
        with open(tools, "w") as f:
            json.dump({"tools": [{"name": "echo", "description": "Echoes",
                                  "inputSchema": {"type": "object"}}]}, f)
        os.chmod(tools, 0o644)
        self.b.stop()
        self.b = Broker(
            "auth { api-keys }\n" + BASE +
            'server "files" { command "python3" "%s" "%s" }\n'
            % (os.path.join(FIXTURES, "mutable_mcp_server.py"), tools) +
            'allow role "dev" tool "files.*"\n'
            'confirm role "ops" tool "files.*"\n'
            'allow user "zed" tool "files.*"\n'
            'deny user "zed" tenant "acme" tool "files.*"\n')
        self.addCleanup(self.b.stop)
        self.b.start(wait_ready=True)
        root = self.add("root", "-r", "admin")
        status, doc = self.call("GET", "/api/v1/admin/servers", key=root)
        self.assertEqual(status, 200, doc)
        (srv,) = doc["servers"]
        self.assertEqual(srv["server"], "files")
        self.assertEqual(srv["state"], "ready")
        self.assertEqual(srv["restarts"], 0)
        self.assertIsNone(srv["error"])
        self.assertTrue(srv["tools"])
        for t in srv["tools"]:
            self.assertEqual(t["everyone"], "deny")
            self.assertEqual(t["roles"], [{"role": "dev", "action": "allow"},
                                          {"role": "ops",
                                           "action": "confirm"}])
            self.assertEqual([(o["subject"], o["name"], o.get("tenant"),
                               o["action"]) for o in t["other_rules"]],
                             [("user", "zed", None, "allow"),
                              ("user", "zed", "acme", "deny")])
            self.assertFalse(t["withheld"])


if __name__ == "__main__":
    unittest.main()
