"""Web sessions: POST /auth/login with an API key sets a session cookie
(__Host- and Secure under TLS), state changes made with it need the
session's X-CSRF-Token, a foreign Origin is refused, and sessions end on
logout, when idle or old, and with the user's key."""
import base64
import hashlib
import json
import os
import re
import signal
import socket
import sqlite3
import tempfile
import time
import unittest

from broker import Broker, wait_for
from test_tls import make_cert

BASE = ('provider "llm" { type ollama base-url "http://127.0.0.1:1" '
        'model "m" }\n')
COOKIE_RX = re.compile(r"^mcpb_session=([A-Za-z0-9_-]{43}); Path=/; "
                       r"Max-Age=(\d+); HttpOnly; SameSite=Strict$")
TLS_COOKIE_RX = re.compile(r"^__Host-mcpb_session=([A-Za-z0-9_-]{43}); "
                           r"Path=/; Max-Age=(\d+); Secure; HttpOnly; "
                           r"SameSite=Strict$")


class SessionCase(unittest.TestCase):
    auth = "auth { api-keys }\n"
    tls = None
    name = "mcpb_session"

    def setUp(self):
        self.b = Broker(self.auth + BASE, tls=self.tls)
        self.addCleanup(self.b.stop)
        self.b.start(wait_ready=False)
        self.scheme = "https" if self.tls else "http"
        self.origin = "%s://127.0.0.1:%d" % (self.scheme, self.b.port)

    def add(self, name, *opts):
        r = self.b.ctl("user", "add", *opts, name)
        return r.stdout.strip().splitlines()[-1]

    def call(self, method, path, body=None, cookie=None, csrf=None,
             origin=None, bearer=None, headers=None):
        h = dict(headers or {})
        if cookie is not None:
            h["Cookie"] = "%s=%s" % (self.name, cookie)
        if csrf is not None:
            h["X-CSRF-Token"] = csrf
        if origin is not None:
            h["Origin"] = origin
        if bearer is not None:
            h["Authorization"] = "Bearer " + bearer
        if body is not None:
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        status, rh, data = self.b.request(method, path, body=body, headers=h)
        return status, rh, json.loads(data) if data else None

    def login(self, key, **kw):
        status, h, doc = self.call("POST", "/auth/login", {"api_key": key},
                                   **kw)
        self.assertEqual(status, 200, doc)
        m = (TLS_COOKIE_RX if self.tls else COOKIE_RX).match(
            h.get("Set-Cookie", ""))
        self.assertIsNotNone(m, h.get("Set-Cookie"))
        return m.group(1), doc, int(m.group(2))

    def db(self):
        return sqlite3.connect(os.path.join(self.b.dir, "state",
                                            "mcpbroker.db"))

    def query(self, sql):
        conn = self.db()
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def count(self):
        return self.query("SELECT count(*) FROM sessions")[0][0]


class PlainSessionTest(SessionCase):
    def test_login_cookie_and_csrf(self):
        key = self.add("alice", "-r", "analyst", "-t", "acme")
        sid, doc, max_age = self.login(key)
        self.assertEqual(doc["user"], "alice")
        self.assertEqual(doc["tenant"], "acme")
        self.assertEqual(doc["roles"], ["analyst"])
        self.assertRegex(doc["csrf_token"], r"^[A-Za-z0-9_-]{43}$")
        self.assertNotEqual(doc["csrf_token"], sid)
        left = doc["expires_at"] / 1000 - time.time()
        self.assertTrue(12 * 3600 - 60 < left <= 12 * 3600, left)
        self.assertTrue(12 * 3600 - 60 < max_age <= 12 * 3600, max_age)
        csrf = doc["csrf_token"]

        # GET needs only the cookie
        status, _, doc = self.call("GET", "/llmchat/status/alice",
                                   cookie=sid)
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["user_id"], "alice")
        status, _, doc = self.call("GET", "/auth/session", cookie=sid)
        self.assertEqual(status, 200)
        self.assertEqual(doc["user"], "alice")
        self.assertEqual(doc["csrf_token"], csrf)
        # a state change needs the token too
        for token in (None, "", "x" * 43, csrf[:-1], csrf + "A"):
            status, _, doc = self.call("POST", "/llmchat/disconnect",
                                       cookie=sid, csrf=token)
            self.assertEqual(status, 403, token)
            self.assertEqual(doc["error"]["code"], "csrf")
        status, _, doc = self.call("DELETE", "/llmchat/history", cookie=sid)
        self.assertEqual(status, 403)
        status, _, doc = self.call("POST", "/llmchat/disconnect", cookie=sid,
                                   csrf=csrf)
        self.assertEqual(status, 200, doc)
        # another user's token is not this session's
        bob = self.add("bob")
        _, bdoc, _ = self.login(bob)
        status, _, _ = self.call("POST", "/llmchat/disconnect", cookie=sid,
                                 csrf=bdoc["csrf_token"])
        self.assertEqual(status, 403)
        # the refusals are in the trail
        out = self.b.ctl("audit", "show", "-k", "auth", "-u", "alice").stdout
        self.assertIn("CSRF", out)
        self.assertIn('"event":"login"', out.replace(" ", ""))

    def test_bearer_wins_over_the_cookie_and_needs_no_csrf(self):
        alice = self.add("alice")
        bob = self.add("bob")
        sid, _, _ = self.login(alice)
        status, _, doc = self.call("GET", "/auth/session", cookie=sid,
                                   bearer=bob)
        self.assertEqual(status, 200)
        self.assertEqual(doc["user"], "bob")
        self.assertNotIn("csrf_token", doc)
        status, _, _ = self.call("POST", "/llmchat/disconnect", cookie=sid,
                                 bearer=bob)
        self.assertEqual(status, 200)
        # a bad bearer is refused even with a good cookie
        status, _, _ = self.call("GET", "/llmchat/status/alice", cookie=sid,
                                 bearer="mcpb_" + "x" * 43)
        self.assertEqual(status, 401)

    def test_login_by_bearer_header_and_errors(self):
        key = self.add("carol")
        status, h, doc = self.call("POST", "/auth/login", bearer=key)
        self.assertEqual(status, 200, doc)
        self.assertRegex(h["Set-Cookie"], COOKIE_RX)
        status, _, doc = self.call("POST", "/auth/login", {})
        self.assertEqual(status, 401)
        status, _, doc = self.call("POST", "/auth/login", {"api_key": 5})
        self.assertEqual(status, 422)
        status, h, _ = self.call("GET", "/auth/login")
        self.assertEqual(status, 405)
        self.assertEqual(h["Allow"], "POST")
        status, h, _ = self.call("GET", "/auth/logout")
        self.assertEqual(status, 405)
        status, h, _ = self.call("POST", "/auth/session")
        self.assertEqual(status, 405)
        self.assertEqual(h["Allow"], "GET")
        self.assertEqual(self.call("GET", "/auth/nope")[0], 404)
        # no session, no cookie: /auth/session is a 401 like any other
        status, h, _ = self.call("GET", "/auth/session")
        self.assertEqual(status, 401)

    def test_bad_keys_at_login_are_refused_rate_limited_and_audited(self):
        good = self.add("dave")
        codes = []
        for i in range(14):
            status, h, doc = self.call("POST", "/auth/login",
                                       {"api_key": "mcpb_bad%040d" % i})
            codes.append(status)
            self.assertNotIn("Set-Cookie", h)
        self.assertEqual(codes[:10], [401] * 10)
        self.assertEqual(codes[10:], [429] * 4)
        # bearer requests from the address share the bucket
        status, _, _ = self.call("GET", "/llmchat/status/dave",
                                 bearer="mcpb_" + "y" * 43)
        self.assertEqual(status, 429)
        # a good key still logs in
        self.login(good)
        rows = self.b.ctl("audit", "show", "-n", "100", "-k",
                          "auth").stdout.count("unknown API key")
        self.assertEqual(rows, 10)

    def test_foreign_origin_is_refused(self):
        key = self.add("erin")
        sid, doc, _ = self.login(key, origin=self.origin)
        csrf = doc["csrf_token"]
        for origin in ("http://evil.example", "null",
                       "http://127.0.0.1:%d" % (self.b.port + 1),
                       "https://127.0.0.1:%d" % self.b.port,
                       "http://localhost:%d" % self.b.port,
                       self.origin + "/", "garbage"):
            status, _, doc = self.call("GET", "/llmchat/status/erin",
                                       bearer=key, origin=origin)
            self.assertEqual(status, 403, origin)
            self.assertEqual(doc["error"]["code"], "cross_origin")
            self.assertIn("cross-origin request refused",
                          doc["error"]["message"])
            status, _, _ = self.call("POST", "/llmchat/disconnect",
                                     cookie=sid, csrf=csrf, origin=origin)
            self.assertEqual(status, 403, origin)
            # nor can a foreign page log someone in
            status, h, _ = self.call("POST", "/auth/login",
                                     {"api_key": key}, origin=origin)
            self.assertEqual(status, 403, origin)
            self.assertNotIn("Set-Cookie", h)
        for origin in (self.origin, self.origin.upper(), None,
                       "http://127.0.0.1:%d" % self.b.port):
            status, _, _ = self.call("GET", "/llmchat/status/erin",
                                     bearer=key, origin=origin)
            self.assertEqual(status, 200, origin)
            status, _, _ = self.call("POST", "/llmchat/disconnect",
                                     cookie=sid, csrf=csrf, origin=origin)
            self.assertEqual(status, 200, origin)

    def test_logout(self):
        key = self.add("fay")
        sid, doc, _ = self.login(key)
        csrf = doc["csrf_token"]
        # logout is a state change: no token, no logout
        status, _, _ = self.call("POST", "/auth/logout", cookie=sid)
        self.assertEqual(status, 403)
        self.assertEqual(self.call("GET", "/auth/session", cookie=sid)[0],
                         200)
        status, h, doc = self.call("POST", "/auth/logout", cookie=sid,
                                   csrf=csrf)
        self.assertEqual(status, 200)
        self.assertEqual(doc, {"logged_out": True})
        self.assertEqual(h["Set-Cookie"], "mcpb_session=; Path=/; "
                         "Max-Age=0; HttpOnly; SameSite=Strict")
        status, h, doc = self.call("GET", "/llmchat/status/fay", cookie=sid)
        self.assertEqual(status, 401)
        self.assertIn("Max-Age=0", h["Set-Cookie"])
        # a second logout, or one without a cookie, is no error
        self.assertEqual(self.call("POST", "/auth/logout", cookie=sid,
                                   csrf=csrf)[0], 200)
        self.assertEqual(self.call("POST", "/auth/logout")[0], 200)
        self.assertEqual(self.count(), 0)
        out = self.b.ctl("audit", "show", "-k", "auth", "-u", "fay").stdout
        self.assertIn("logout", out)

    def test_a_new_login_ends_the_browsers_old_session(self):
        key = self.add("gus")
        old, _, _ = self.login(key)
        new, _, _ = self.login(key, cookie=old)
        self.assertNotEqual(old, new)
        self.assertEqual(self.call("GET", "/auth/session", cookie=old)[0],
                         401)
        self.assertEqual(self.call("GET", "/auth/session", cookie=new)[0],
                         200)

    def test_rotation_and_deletion_end_sessions(self):
        hal = self.add("hal")
        ivy = self.add("ivy")
        hal_sid, _, _ = self.login(hal)
        hal_sid2, _, _ = self.login(hal)
        ivy_sid, _, _ = self.login(ivy)
        self.b.ctl("user", "key", "hal")
        for sid in (hal_sid, hal_sid2):
            status, h, doc = self.call("GET", "/llmchat/status/hal",
                                       cookie=sid)
            self.assertEqual(status, 401)
            self.assertIn("Max-Age=0", h["Set-Cookie"])
        self.assertEqual(self.call("GET", "/llmchat/status/ivy",
                                   cookie=ivy_sid)[0], 200)
        self.b.ctl("user", "del", "ivy")
        self.assertEqual(self.call("GET", "/llmchat/status/ivy",
                                   cookie=ivy_sid)[0], 401)
        self.assertEqual(self.count(), 0)

    def test_stored_hashed_never_logged(self):
        key = self.add("jo")
        sids = [self.login(key)[0] for _ in range(3)]
        self.assertEqual(len(set(sids)), 3)
        db = os.path.join(self.b.dir, "state", "mcpbroker.db")
        # the sessions table came with schema version 3
        self.assertGreaterEqual(self.query("PRAGMA user_version")[0][0], 3)
        rows = self.query("SELECT id_hash, user, length(csrf), created, "
                          "last_seen, expires FROM sessions")
        self.assertEqual(len(rows), 3)
        hashes = {bytes(r[0]) for r in rows}
        self.assertEqual(hashes, {hashlib.sha256(s.encode()).digest()
                                  for s in sids})
        for r in rows:
            self.assertEqual(r[1], "jo")
            self.assertEqual(r[2], 43)
            self.assertEqual(r[5] - r[3], 12 * 3600 * 1000)
        for name in os.listdir(os.path.dirname(db)):
            with open(os.path.join(os.path.dirname(db), name), "rb") as f:
                data = f.read()
            for sid in sids:
                self.assertNotIn(sid.encode(), data, name)
        # 256 random bits each; none of them ever in the daemon's log
        for sid in sids:
            self.assertEqual(len(base64.urlsafe_b64decode(sid + "=")), 32)
            self.assertNotIn(sid, self.b.log())
            self.assertNotIn(sid[:20], self.b.log())
        self.assertIn("jo logged in", self.b.log())

    def test_sessions_per_user_are_capped(self):
        key = self.add("kim")
        first, _, _ = self.login(key)
        for _ in range(70):
            self.login(key)
        self.assertEqual(self.count(), 64)
        self.assertEqual(self.call("GET", "/auth/session",
                                   cookie=first)[0], 401)

    def test_bad_cookies(self):
        key = self.add("lee")
        sid, _, _ = self.login(key)
        for cookie in ("mcpb_session=%s; mcpb_session=%s" % (sid, sid),
                       "mcpb_session=short", "mcpb_session=%sA" % sid,
                       'mcpb_session="%s"' % sid, "mcpb_session="):
            status, h, doc = self.call("GET", "/auth/session",
                                       headers={"Cookie": cookie})
            self.assertEqual(status, 400, cookie)
            self.assertEqual(doc["error"]["code"], "bad_cookie")
            self.assertEqual(h["Set-Cookie"], "mcpb_session=; Path=/; "
                             "Max-Age=0; HttpOnly; SameSite=Strict")
        # other cookies and the other name are ignored
        status, _, doc = self.call("GET", "/auth/session", headers={
            "Cookie": "theme=dark; mcpb_session=%s; x=\"y z\"" % sid})
        self.assertEqual(status, 200)
        self.assertEqual(doc["user"], "lee")
        status, _, _ = self.call("GET", "/auth/session", headers={
            "Cookie": "__Host-mcpb_session=%s" % sid})
        self.assertEqual(status, 401)
        # a well-formed cookie nobody issued
        status, h, _ = self.call("GET", "/auth/session", cookie="A" * 43)
        self.assertEqual(status, 401)
        self.assertIn("Max-Age=0", h["Set-Cookie"])
        # overlong headers are refused, not cut
        status, _, _ = self.call("GET", "/auth/session", cookie=sid,
                                 csrf="x" * 200)
        self.assertEqual(status, 400)
        status, _, _ = self.call("GET", "/auth/session", cookie=sid,
                                 origin="http://" + "a" * 400)
        self.assertEqual(status, 400)


class RepeatedHeaderTest(SessionCase):
    def raw(self, lines):
        with socket.create_connection(("127.0.0.1", self.b.port),
                                      timeout=5) as s:
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        return int(data.split(b" ", 2)[1])

    def test_repeated_origin_or_cookie_headers(self):
        key = self.add("max")
        sid, _, _ = self.login(key)
        host = "Host: 127.0.0.1:%d" % self.b.port
        base = ["GET /auth/session HTTP/1.1", host, "Connection: close"]
        self.assertEqual(self.raw(base + ["Cookie: mcpb_session=" + sid]),
                         200)
        self.assertEqual(self.raw(base + ["Origin: " + self.origin,
                                          "Origin: " + self.origin,
                                          "Cookie: mcpb_session=" + sid]),
                         400)
        self.assertEqual(self.raw(base + ["Cookie: mcpb_session=" + sid,
                                          "Cookie: mcpb_session=" + sid]),
                         400)
        self.assertEqual(self.raw(base + ["Cookie: a=b",
                                          "Cookie: mcpb_session=" + sid]),
                         200)


class IdleExpiryTest(SessionCase):
    auth = "auth { api-keys session idle 2s lifetime 1h }\n"

    def test_idle_session_ends_and_use_keeps_it(self):
        key = self.add("ned")
        sid, doc, _ = self.login(key)
        self.assertEqual(doc["idle_timeout_ms"], 2000)
        # used every second, it outlives its idle time
        for _ in range(4):
            time.sleep(1)
            self.assertEqual(self.call("GET", "/auth/session",
                                       cookie=sid)[0], 200)
        time.sleep(2.5)
        status, h, _ = self.call("GET", "/auth/session", cookie=sid)
        self.assertEqual(status, 401)
        self.assertIn("Max-Age=0", h["Set-Cookie"])
        self.assertEqual(self.count(), 0)


class AbsoluteExpiryTest(SessionCase):
    auth = "auth { api-keys session idle 1h lifetime 3s }\n"

    def test_session_ends_at_its_lifetime_however_busy(self):
        key = self.add("oz")
        start = time.monotonic()
        sid, doc, max_age = self.login(key)
        self.assertEqual(max_age, 3)
        while self.call("GET", "/auth/session", cookie=sid)[0] == 200:
            self.assertLess(time.monotonic() - start, 10)
            time.sleep(0.2)
        self.assertGreater(time.monotonic() - start, 2.5)

    def test_ended_sessions_are_purged_at_start(self):
        key = self.add("pia")
        self.login(key)
        self.login(key)
        time.sleep(3.2)
        self.b.signal(signal.SIGTERM)
        self.b.wait_exit()
        self.b._log_thread.join(timeout=5)
        self.b.proc.stderr.close()
        self.assertEqual(self.count(), 2)
        self.b.start(wait_ready=False)
        wait_for(lambda: self.count() == 0, what="the purge at start")


class AllowedOriginTest(SessionCase):
    auth = ('auth { api-keys allowed-origin "https://chat.example.com" '
            'session idle 30m }\n')

    def test_allowed_origin(self):
        key = self.add("pat")
        sid, doc, _ = self.login(key, origin="https://chat.example.com")
        status, _, _ = self.call("POST", "/llmchat/disconnect", cookie=sid,
                                 csrf=doc["csrf_token"],
                                 origin="https://CHAT.example.com:443")
        self.assertEqual(status, 200)
        self.assertEqual(self.call("GET", "/llmchat/status/pat", bearer=key,
                                   origin="http://chat.example.com")[0], 403)
        self.assertEqual(self.call("GET", "/llmchat/status/pat", bearer=key,
                                   origin=self.origin)[0], 200)


class DevModeTest(SessionCase):
    auth = ""

    def test_no_logins_without_keys(self):
        status, h, doc = self.call("POST", "/auth/login",
                                   {"api_key": "mcpb_x"})
        self.assertEqual(status, 404)
        self.assertIn("api-keys", doc["error"]["message"])
        self.assertNotIn("Set-Cookie", h)
        self.assertEqual(self.call("POST", "/auth/logout")[0], 404)
        status, _, doc = self.call("GET", "/auth/session")
        self.assertEqual(status, 200)
        self.assertEqual(doc, {"user": "dev", "tenant": "default",
                               "roles": []})
        # Origin is checked in development installs too
        self.assertEqual(self.call("POST", "/llmchat/disconnect",
                                   origin="http://evil.example")[0], 403)
        self.assertEqual(self.call("POST", "/llmchat/disconnect",
                                   origin=self.origin)[0], 200)


class TlsSessionTest(SessionCase):
    name = "__Host-mcpb_session"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.tls = make_cert(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_host_prefixed_secure_cookie(self):
        key = self.add("quinn")
        sid, doc, _ = self.login(key, origin=self.origin)
        csrf = doc["csrf_token"]
        status, _, doc = self.call("GET", "/auth/session", cookie=sid)
        self.assertEqual(status, 200)
        self.assertEqual(doc["user"], "quinn")
        # the unprefixed name means nothing on a TLS listener
        status, _, _ = self.call("GET", "/auth/session", headers={
            "Cookie": "mcpb_session=" + sid})
        self.assertEqual(status, 401)
        status, _, _ = self.call("POST", "/llmchat/disconnect", cookie=sid)
        self.assertEqual(status, 403)
        status, _, _ = self.call("POST", "/llmchat/disconnect", cookie=sid,
                                 csrf=csrf, origin=self.origin)
        self.assertEqual(status, 200)
        # the plain-HTTP origin of the same host and port is another one
        status, _, _ = self.call("POST", "/llmchat/disconnect", cookie=sid,
                                 csrf=csrf, origin="http://127.0.0.1:%d"
                                 % self.b.port)
        self.assertEqual(status, 403)
        status, h, _ = self.call("POST", "/auth/logout", cookie=sid,
                                 csrf=csrf)
        self.assertEqual(status, 200)
        self.assertEqual(h["Set-Cookie"], "__Host-mcpb_session=; Path=/; "
                         "Max-Age=0; Secure; HttpOnly; SameSite=Strict")
        self.assertNotIn(sid, self.b.log())


if __name__ == "__main__":
    unittest.main()
