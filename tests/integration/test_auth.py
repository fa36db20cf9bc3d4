"""Users and API keys: made with mcpbrokerctl, stored hashed, required by
the API when `auth { api-keys }` is configured.  JWT bearer tokens from an
identity provider (`auth { jwt ... }`), signed here: HS256 with hmac,
RS256 and ES256 with the openssl command."""
import base64
import hashlib
import hmac
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
import unittest

from broker import MCPBROKER, Broker, wait_for
from llmfixtures import KEY, PROVIDERS, FakeLLM
from mcpfixtures import NET_PROBE, hostile_cmd


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
        # Up to 8 KiB reaches the controller; longer stops at the door.
        status, _, doc = self.status("/llmchat/status/alice", "x" * 8192)
        self.assertEqual(status, 401)
        self.assertIn("not valid", doc["error"]["message"])
        status, _, doc = self.status("/llmchat/status/alice", "x" * 9000)
        self.assertEqual(status, 401)
        self.assertIn("too long", doc["error"]["message"])

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
        # policy sees 16 roles: a 17th (a deny for it) would not hold
        roles = ",".join("r%d" % i for i in range(17))
        r = self.b.ctl("user", "add", "-r", roles, "erin", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("at most 16 roles", r.stderr)
        self.add("erin", "-r", roles.rsplit(",", 1)[0])
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


def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def der_to_jws(der):
    """An ECDSA signature as DER (what openssl makes) to JWS's r || s."""
    assert der[0] == 0x30
    i = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7f)
    out = b""
    for _ in range(2):
        assert der[i] == 0x02
        n = der[i + 1]
        out += der[i + 2:i + 2 + n].lstrip(b"\0").rjust(32, b"\0")
        i += 2 + n
    return out


class Keys:
    """An HMAC secret, an RSA 2048 and an EC P-256 key, and their JWKS."""

    def __init__(self, directory):
        self.dir = directory
        self.secret = os.urandom(32)
        self.rsa = os.path.join(directory, "rsa.pem")
        self.ec = os.path.join(directory, "ec.pem")
        for path, opts in ((self.rsa, ["-algorithm", "RSA", "-pkeyopt",
                                       "rsa_keygen_bits:2048"]),
                           (self.ec, ["-algorithm", "EC", "-pkeyopt",
                                      "ec_paramgen_curve:P-256"])):
            subprocess.run(["openssl", "genpkey"] + opts + ["-out", path],
                           check=True, capture_output=True)
        mod = subprocess.run(["openssl", "rsa", "-in", self.rsa, "-noout",
                              "-modulus"], check=True, capture_output=True,
                             text=True).stdout.strip()
        self.n = bytes.fromhex(mod.split("=", 1)[1])
        spki = subprocess.run(["openssl", "pkey", "-in", self.ec, "-pubout",
                               "-outform", "DER"], check=True,
                              capture_output=True).stdout
        # a P-256 SubjectPublicKeyInfo ends with the point 04 || x || y
        self.point = spki[-65:]
        assert self.point[0] == 4

    def jwks(self, kid_suffix=""):
        return {"keys": [
            {"kty": "oct", "kid": "h" + kid_suffix, "k": b64u(self.secret)},
            {"kty": "RSA", "kid": "r" + kid_suffix, "alg": "RS256",
             "use": "sig", "n": b64u(self.n), "e": b64u(b"\x01\x00\x01")},
            {"kty": "EC", "kid": "e" + kid_suffix, "crv": "P-256",
             "x": b64u(self.point[1:33]), "y": b64u(self.point[33:])},
        ]}

    def sign(self, alg, header, claims):
        h = b64u(json.dumps(header, separators=(",", ":")).encode())
        p = b64u(json.dumps(claims, separators=(",", ":")).encode())
        data = ("%s.%s" % (h, p)).encode()
        if alg == "HS256":
            sig = hmac.new(self.secret, data, hashlib.sha256).digest()
        elif alg in ("RS256", "ES256"):
            key = self.rsa if alg == "RS256" else self.ec
            sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign",
                                  key], input=data, check=True,
                                 capture_output=True).stdout
            if alg == "ES256":
                sig = der_to_jws(sig)
        else:
            sig = b""
        return "%s.%s.%s" % (h, p, b64u(sig))


ISS = "idp"
AUD = "mcpb"


def claims(**kw):
    c = {"iss": ISS, "aud": AUD, "exp": int(time.time()) + 300,
         "sub": "jane"}
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


class JwtTest(unittest.TestCase):
    """auth { api-keys jwt ... }: both kinds of bearer, told apart by the
    key's prefix; identity, tenant and roles from the token's claims."""

    @classmethod
    def setUpClass(cls):
        cls.keydir = tempfile.mkdtemp(prefix="mcpbroker-jwt-")
        os.chmod(cls.keydir, 0o755)
        cls.keys = Keys(cls.keydir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.keydir, ignore_errors=True)

    def start(self, api_keys=True, jwks=None, wait_ready=True, extra=""):
        self.jwks = os.path.join(self.keydir, "jwks-%s.json" % self.id())
        with open(self.jwks, "w") as f:
            f.write(json.dumps(jwks or self.keys.jwks(), indent=1))
        self.b = Broker('auth {\n%s\tjwt issuer "%s" audience "%s" '
                        'jwks-file "%s" \\\n\t    roles-claim "groups" '
                        'tenant-claim "org"\n}\n'
                        'server "h" { command %s }\n'
                        'allow role "analyst" tool "h.echo"\n'
                        'allow role "ops" tool "h.*"\n%s'
                        % ("\tapi-keys\n" if api_keys else "", ISS, AUD,
                           self.jwks, " ".join('"%s"' % a for a in
                                               hostile_cmd("slow-call")),
                           extra))
        self.addCleanup(self.b.stop)
        self.b.start(wait_ready=wait_ready)
        return self.b

    def call(self, path, bearer=None):
        headers = {"Authorization": "Bearer " + bearer} if bearer else {}
        status, h, data = self.b.request("GET", path, headers=headers)
        return status, h, json.loads(data)

    def tools(self, bearer):
        status, _, doc = self.call("/api/v1/tools", bearer)
        self.assertEqual(status, 200, doc)
        (srv,) = doc["servers"]
        return sorted(t["name"] for t in srv["tools"])

    def refused(self, bearer, why):
        status, h, doc = self.call("/llmchat/status/jane", bearer)
        self.assertEqual(status, 401, doc)
        self.assertEqual(h.get("WWW-Authenticate"), "Bearer")
        self.assertEqual(doc["error"]["code"], "unauthorized")
        self.assertIn(why, doc["error"]["message"])
        self.assertNotIn(bearer, doc["error"]["message"])
        return doc["error"]["message"]

    def assert_fits(self, token):
        # what the frontend relays today: an Authorization value < 256 bytes
        self.assertLess(len(token), 256, "token too long for the frontend")
        return token

    def test_identity_tenant_and_roles_come_from_the_token(self):
        self.start()
        k = self.keys
        hs = self.assert_fits(k.sign("HS256", {"alg": "HS256", "kid": "h"},
                                     claims(groups=["analyst"], org="acme")))
        status, _, doc = self.call("/llmchat/status/jane", hs)
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc, {"user_id": "jane", "connected": False})
        # the identity is the token's, not the path's
        self.assertEqual(self.call("/llmchat/status/bob", hs)[0], 403)
        # policy sees the token's roles: analyst gets echo only ...
        self.assertEqual(self.tools(hs), ["echo"])
        # ... ops everything on h, as a space-separated string too
        es = self.assert_fits(k.sign("ES256", {"alg": "ES256", "kid": "e"},
                                     claims(sub="olga", groups="ops x")))
        self.assertEqual(self.tools(es), ["echo", "slow"])
        self.assertEqual(self.call("/llmchat/status/olga", es)[0], 200)
        # no roles, no tools (no match = deny)
        none = self.assert_fits(k.sign("ES256", {"alg": "ES256"}, claims()))
        self.assertEqual(self.tools(none), [])

    def post(self, path, body, bearer):
        status, _, data = self.b.request(
            "POST", path, json.dumps(body), {
                "Authorization": "Bearer " + bearer,
                "Content-Type": "application/json"}, timeout=30)
        return status, json.loads(data)

    def test_a_name_in_another_tenant_is_another_user(self):
        """A local user given a token user's name, in another tenant, gets
        neither that user's chat session nor its conversations; and a
        token's roles are read at each message, not kept from connect."""
        llm = FakeLLM()
        self.addCleanup(llm.stop)
        os.environ["FAKE_LLM_KEY"] = KEY
        self.start(extra='provider "llm" { %s }\n'
                   % (PROVIDERS["openai"] % llm.port))
        jane = self.keys.sign("HS256", {"alg": "HS256", "kid": "h"},
                              claims(groups=["ops"], org="acme"))
        status, doc = self.post("/llmchat/connect", {"provider": "llm"}, jane)
        self.assertEqual(status, 200, doc)
        conv = doc["conversation_id"]
        llm.script({"text": "hello jane"})
        status, doc = self.post("/llmchat/chat", {"message": "hi",
                                                  "streaming": False}, jane)
        self.assertEqual((status, doc.get("content")), (200, "hello jane"))
        squat = self.b.ctl("user", "add", "-t", "evil", "-r", "ops",
                           "jane").stdout.strip().splitlines()[-1]
        status, doc = self.post("/llmchat/chat", {"message": "hi",
                                                  "streaming": False}, squat)
        self.assertEqual((status, doc["error"]["code"]),
                         (409, "not_connected"))
        self.assertEqual(self.call("/llmchat/history", squat)[0], 404)
        self.assertEqual(self.call("/api/v1/conversations", squat)[2]
                         ["conversations"], [])
        self.assertEqual(self.call("/api/v1/conversations/" + conv,
                                   squat)[0], 404)
        self.assertEqual(len(self.call("/api/v1/conversations", jane)[2]
                             ["conversations"]), 1)
        # connecting under the same name opens the local user's own
        # session, and ends nothing of the token user's (below)
        status, doc = self.post("/llmchat/connect", {"provider": "llm"},
                                squat)
        self.assertEqual(status, 200, doc)
        self.assertNotEqual(doc["conversation_id"], conv)
        # deleting the local "jane" ends nothing of the token user's,
        # and erases none of her conversations
        self.b.ctl("user", "del", "jane")
        self.assertEqual(len(self.call("/api/v1/conversations", jane)[2]
                             ["conversations"]), 1)
        # the same session, on a token that no longer carries "ops"
        bare = self.keys.sign("HS256", {"alg": "HS256", "kid": "h"},
                              claims(groups=["analyst"], org="acme"))
        llm.script({"tool_calls": [{"name": "h__slow", "arguments": {}}]},
                   {"echo_tool_result": True})
        status, doc = self.post("/llmchat/chat", {"message": "go",
                                                  "streaming": False}, bare)
        self.assertEqual(status, 200, doc)
        self.assertIn("refused by policy", json.dumps(doc))

    def whoami(self, bearer):
        """The pid of the per-user instance a /mcp call of bearer reaches."""
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "t",
                                                       "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}}
        status, _, data = self.b.request("POST", "/mcp/who", json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "p.whoami", "arguments": {}, "_meta": meta}}),
            {"Authorization": "Bearer " + bearer,
             "Content-Type": "application/json",
             "Accept": "application/json, text/event-stream",
             "MCP-Protocol-Version": "2026-07-28",
             "Mcp-Method": "tools/call", "Mcp-Name": "p.whoami"}, timeout=30)
        self.assertEqual(status, 200, data)
        text = json.loads(data)["result"]["content"][0]["text"]
        return json.loads(text)["pid"]

    def test_per_user_instances_are_per_tenant(self):
        """Two users of one name in two tenants are two users to an
        isolation per-user server: neither reaches the other's instance,
        from /mcp or from an administrator's call."""
        self.start(extra='server "p" { command "python3" "%s" '
                   'isolation per-user }\n'
                   'toolset "who" { tools "p.whoami" }\n'
                   'allow role "ops" tool "p.whoami"\n' % NET_PROBE)
        jane = self.keys.sign("HS256", {"alg": "HS256", "kid": "h"},
                              claims(groups=["ops"], org="acme"))
        squat = self.b.ctl("user", "add", "-t", "evil", "-r", "ops",
                           "jane").stdout.strip().splitlines()[-1]
        acme, evil = self.whoami(jane), self.whoami(squat)
        self.assertNotEqual(acme, evil)
        self.assertEqual(self.whoami(jane), acme)

        def admin_call(user):
            r = self.b.ctl("server", "call", "-u", user, "p", "whoami")
            return json.loads(json.loads(r.stdout)["content"][0]["text"])[
                "pid"]

        self.assertEqual(admin_call("acme/jane"), acme)
        self.assertEqual(admin_call("evil/jane"), evil)
        self.assertEqual(admin_call("jane"), evil)   # the local user's tenant
        r = self.b.ctl("server", "call", "-u", "acme/../jane", "p", "whoami",
                       check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("a user is NAME or TENANT/NAME", r.stderr)

    def test_mcp_sessions_are_per_tenant(self):
        """A local user given a token user's name, in another tenant,
        neither crowds that user's /mcp sessions out (32 a user) nor
        uses one: presenting its id is refused and audited."""
        self.start(extra='toolset "t" { tools "h.echo" }\n')
        jane = self.keys.sign("HS256", {"alg": "HS256", "kid": "h"},
                              claims(groups=["ops"], org="acme"))
        squat = self.b.ctl("user", "add", "-t", "evil", "-r", "ops",
                           "jane").stdout.strip().splitlines()[-1]

        def rpc(key, method, sid=None):
            h = {"Authorization": "Bearer " + key,
                 "Content-Type": "application/json",
                 "Accept": "application/json, text/event-stream"}
            params = {}
            if sid is not None:
                h["Mcp-Session-Id"] = sid
                h["MCP-Protocol-Version"] = "2025-06-18"
            else:
                params = {"protocolVersion": "2025-06-18",
                          "capabilities": {},
                          "clientInfo": {"name": "t", "version": "1"}}
            status, hdrs, data = self.b.request(
                "POST", "/mcp/t", json.dumps({"jsonrpc": "2.0", "id": 1,
                                              "method": method,
                                              "params": params}), h)
            hdrs = {k.lower(): v for k, v in hdrs.items()}
            return status, hdrs.get("mcp-session-id")

        status, sid = rpc(jane, "initialize")
        self.assertEqual(status, 200)
        for _ in range(33):
            self.assertEqual(rpc(squat, "initialize")[0], 200)
        self.assertEqual(rpc(jane, "ping", sid)[0], 200)
        self.assertEqual(rpc(squat, "ping", sid)[0], 404)
        out = self.b.ctl("audit", "export", "--format", "jsonl").stdout
        rows = [json.loads(line) for line in out.splitlines()]
        self.assertTrue(any(r["kind"] == "auth" and r["user"] == "jane" and
                            r["tenant"] == "evil" and
                            r["detail"].get("reason") ==
                            "MCP session of another user" for r in rows))

    def test_tenant_admin_role_and_tenant_claim(self):
        self.start()
        boss = self.keys.sign("HS256", {"alg": "HS256"},
                              claims(sub="boss", groups=["tenant-admin"],
                                     org="acme"))
        status, _, doc = self.call("/api/v1/audit", boss)
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["rows"], [])   # no rows of tenant acme yet
        plain = self.keys.sign("HS256", {"alg": "HS256"}, claims(org="acme"))
        self.assertEqual(self.call("/api/v1/audit", plain)[0], 403)

    def test_rs256(self):
        self.start()
        rs = self.keys.sign("RS256", {"alg": "RS256", "kid": "r"},
                            claims(groups=["ops"]))
        self.assertEqual(self.tools(rs), ["echo", "slow"])

    def test_refused_tokens_are_401_and_audited(self):
        self.start()
        k = self.keys
        now = int(time.time())
        cases = [
            (k.sign("HS256", {"alg": "HS256"}, claims(exp=now - 120)),
             "the token has expired", "expired"),
            (k.sign("HS256", {"alg": "HS256"}, claims(aud="other")),
             "not meant for this audience", "aud"),
            (k.sign("HS256", {"alg": "HS256"}, claims(aud=["x", "y"])),
             "not meant for this audience", "aud array"),
            (k.sign("HS256", {"alg": "HS256"}, claims(iss="evil")),
             "issuer is not accepted", "iss"),
            (k.sign("none", {"alg": "none"}, claims()),
             "not a signed JWT", "none, no signature"),
            (k.sign("HS256", {"alg": "none"}, claims()),
             "algorithm is not accepted", "none, signed"),
            (k.sign("HS256", {"alg": "HS256", "kid": "r"}, claims()),
             "does not match its key", "HS256 with the RSA key's kid"),
            (k.sign("ES256", {"alg": "ES256"}, claims(nbf=now + 600)),
             "not valid yet", "nbf"),
        ]
        tampered = k.sign("HS256", {"alg": "HS256"}, claims())
        tampered = tampered[:-2] + ("A" if tampered[-2] != "A" else "Q") + \
            tampered[-1]
        cases.append((tampered, "signature does not verify", "tampered"))
        for token, why, what in cases:
            with self.subTest(what):
                self.assertLess(len(token), 256)
                self.refused(token, why)
        # each refusal on the trail, with its reason and never the token
        trail = self.b.ctl("audit", "show", "-n", "100", "-k",
                           "auth").stdout
        self.assertEqual(trail.count("invalid token"), len(cases), trail)
        self.assertIn("invalid token: the token has expired", trail)
        for token, _, _ in cases:
            self.assertNotIn(token.split(".")[2] or token, trail)
            self.assertNotIn(token, self.b.log())
        self.assertIn("refused credential from 127.0.0.1: invalid token", self.b.log())

    def test_refused_tokens_count_against_the_address(self):
        self.start()
        bad = self.keys.sign("HS256", {"alg": "HS256"}, claims(aud="x"))
        good = self.keys.sign("HS256", {"alg": "HS256"}, claims())
        codes = [self.call("/llmchat/status/jane", bad)[0]
                 for _ in range(15)]
        self.assertEqual(codes[:10], [401] * 10)
        self.assertEqual(codes[-1], 429)
        self.assertEqual(self.call("/llmchat/status/jane", good)[0], 200)

    def test_api_keys_beside_tokens(self):
        self.start()
        key = self.b.ctl("user", "add", "-r", "ops", "kim").stdout.strip(
        ).splitlines()[-1]
        self.assertEqual(self.tools(key), ["echo", "slow"])
        status, _, doc = self.call("/llmchat/status/kim", "mcpb_" + "0" * 43)
        self.assertEqual(status, 401)
        self.assertIn("API key is not valid", doc["error"]["message"])
        self.assertIn("send your API key or token",
                      self.call("/llmchat/status/kim")[2]["error"]["message"])

    def test_jwt_alone_refuses_api_keys(self):
        self.start(api_keys=False)
        key = self.b.ctl("user", "add", "kim").stdout.strip().splitlines()[-1]
        msg = self.refused(key, "API keys are not accepted")
        self.assertNotIn(key, msg)
        trail = self.b.ctl("audit", "show", "-k", "auth").stdout
        self.assertIn("API key not accepted", trail)
        token = self.keys.sign("HS256", {"alg": "HS256"}, claims())
        self.assertEqual(self.call("/llmchat/status/jane", token)[0], 200)
        self.assertNotIn(key, self.b.log())

    def test_reload_brings_the_new_key_set(self):
        self.start()
        old = self.keys.sign("HS256", {"alg": "HS256", "kid": "h"}, claims())
        self.assertEqual(self.call("/llmchat/status/jane", old)[0], 200)
        # rotation: the old kids are gone
        with open(self.jwks, "w") as f:
            json.dump(self.keys.jwks("2"), f)
        self.b.ctl("reload")
        new = self.keys.sign("HS256", {"alg": "HS256", "kid": "h2"},
                             claims())
        wait_for(lambda: self.call("/llmchat/status/jane", new)[0] == 200,
                 what="the new key set")
        self.refused(old, "no key matches the token's \"kid\"")
        # a broken key set is refused; the running one stays
        with open(self.jwks, "w") as f:
            f.write('{"keys": [{"kty": "oct", "k": "c2hvcnQ"}]}')
        r = self.b.ctl("reload", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("jwks-file", r.stderr)
        self.assertEqual(self.call("/llmchat/status/jane", new)[0], 200)

    def test_check_reports_a_bad_key_set_with_file_and_line(self):
        b = Broker('auth {\n\tapi-keys\n\tjwt issuer "i" audience "a" '
                   'jwks-file "%s/jwks.json"\n}\n' % self.keydir)
        self.addCleanup(b.stop)
        path = os.path.join(self.keydir, "jwks.json")
        for text, why in (
                ('{"keys": [', "not a JSON object"),
                ('{"keys": []}', "no usable key"),
                ('{"keys": [{"kty": "RSA", "n": "AQAB", "e": "AQAB"}]}',
                 "keys[0]: an RSA modulus of 17 bits"),
                ('{"keys": [{"kty": "EC", "crv": "P-256", "x": "AA", '
                 '"y": "AA", "d": "AA"}]}', "keys[0]: a private key"),
                (None, "No such file or directory")):
            with self.subTest(why):
                if text is None:
                    os.unlink(path)
                else:
                    with open(path, "w") as f:
                        f.write(text)
                r = subprocess.run([MCPBROKER, "-n", "-f", b.conf],
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn('%s:7: jwks-file "%s": %s' % (b.conf, path, why),
                              r.stderr)
        with open(path, "w") as f:
            json.dump(self.keys.jwks(), f)
        r = subprocess.run([MCPBROKER, "-n", "-v", "-f", b.conf],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('roles-claim "roles" tenant-claim "tenant" '
                      'user-claim "sub"', r.stdout)
        self.assertNotIn(b64u(self.keys.secret), r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
