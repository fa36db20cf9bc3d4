"""The web UI's files as the frontend serves them: from the table compiled
into the daemon, with content-hashed asset names, ETags and the security
headers on every answer."""
import re
import unittest

from broker import Broker

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; "
       "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")


class WebTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.b = Broker("")
        cls.b.start()

    @classmethod
    def tearDownClass(cls):
        cls.b.stop()

    def assert_secure(self, headers):
        self.assertEqual(headers["Content-Security-Policy"], CSP)
        self.assertEqual(headers["X-Content-Type-Options"], "nosniff")
        self.assertEqual(headers["X-Frame-Options"], "DENY")
        self.assertEqual(headers["Referrer-Policy"], "no-referrer")

    def assets(self, page):
        return re.findall(r'(?:src|href)="(/assets/[^"]+)"', page.decode())

    def test_pages_and_their_assets(self):
        for path in ("/", "/admin"):
            status, headers, page = self.b.request("GET", path)
            self.assertEqual(status, 200, path)
            self.assert_secure(headers)
            self.assertEqual(headers["Content-Type"],
                             "text/html; charset=utf-8")
            self.assertEqual(headers["Cache-Control"], "no-cache")
            self.assertRegex(headers["ETag"], r'^"[0-9a-f]{32}"$')
            # No inline script or style: the CSP would refuse them anyway.
            self.assertNotRegex(page, rb"<script(?![^>]*\bsrc=)[^>]*>")
            self.assertNotIn(b"<style", page)
            self.assertNotRegex(page, rb"\son[a-z]+=")
            self.assertNotRegex(page, rb'\sstyle=')
            refs = self.assets(page)
            self.assertTrue(refs)
            for ref in refs:
                self.assertRegex(ref, r"^/assets/[\w.-]+\.[0-9a-f]{12}\."
                                      r"(js|css)$")
                status, headers, body = self.b.request("GET", ref)
                self.assertEqual(status, 200, ref)
                self.assert_secure(headers)
                self.assertEqual(headers["Cache-Control"],
                                 "public, max-age=31536000, immutable")
                self.assertTrue(headers["Content-Type"].startswith(
                    "text/javascript" if ref.endswith(".js")
                    else "text/css"))
                self.assertGreater(len(body), 0)

    def test_modules_name_hashed_modules(self):
        """A module's imports are rewritten to hashed names too, so a page
        and every file it loads come from one build."""
        _, _, page = self.b.request("GET", "/")
        for ref in self.assets(page):
            if not ref.endswith(".js") or "/chat." not in ref:
                continue
            _, _, body = self.b.request("GET", ref)
            for imp in re.findall(rb"from\s+'([^']+)'", body):
                self.assertRegex(imp.decode(),
                                 r"^\./[\w-]+\.[0-9a-f]{12}\.js$")
                self.assertEqual(self.b.request(
                    "GET", "/assets/" + imp.decode()[2:])[0], 200)

    def test_etag_revalidation(self):
        status, headers, _ = self.b.request("GET", "/")
        etag = headers["ETag"]
        for inm in (etag, "W/" + etag, '"x", ' + etag, "*"):
            status, h, body = self.b.request("GET", "/",
                                             headers={"If-None-Match": inm})
            self.assertEqual(status, 304, inm)
            self.assertEqual(body, b"")
            self.assertEqual(h["ETag"], etag)
            self.assert_secure(h)
        status, _, body = self.b.request(
            "GET", "/", headers={"If-None-Match": '"0123"'})
        self.assertEqual(status, 200)
        self.assertGreater(len(body), 0)

    def test_head_and_methods(self):
        status, headers, body = self.b.request("HEAD", "/")
        self.assertEqual(status, 200)
        self.assertEqual(body, b"")
        self.assert_secure(headers)
        for method in ("POST", "PUT", "DELETE"):
            status, headers, _ = self.b.request(method, "/")
            self.assertEqual(status, 405, method)
            self.assertEqual(headers["Allow"], "GET, HEAD")

    def test_unknown_files(self):
        for path in ("/assets/chat.js", "/assets/nothing.0123456789ab.js",
                     "/index.html", "/favicon.ico", "/admin/x"):
            status, headers, _ = self.b.request("GET", path)
            self.assertEqual(status, 404, path)


if __name__ == "__main__":
    unittest.main()
