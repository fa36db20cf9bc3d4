"""TLS listeners: certificate from the parent, TLS 1.2+, no plaintext."""
import os
import socket
import ssl
import subprocess
import tempfile
import unittest

from broker import MCPBROKER, Broker


def make_cert(directory):
    cert = os.path.join(directory, "tls.crt")
    key = os.path.join(directory, "tls.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec",
                    "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/CN=localhost", "-days", "2",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    os.chmod(key, 0o600)
    return cert, key


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.cert, cls.key = make_cert(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_https_with_verification(self):
        b = Broker(tls=(self.cert, self.key))
        self.addCleanup(b.stop)
        b.start()
        status, doc = b.get("/healthz")
        self.assertEqual(status, 200)
        self.assertEqual(doc, {"status": "ok"})
        ctx = ssl.create_default_context(cafile=self.cert)
        with socket.create_connection(("127.0.0.1", b.port)) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                self.assertIn(s.version(), ("TLSv1.2", "TLSv1.3"))

    def test_old_protocols_refused(self):
        b = Broker(tls=(self.cert, self.key))
        self.addCleanup(b.stop)
        b.start()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        try:
            ctx.minimum_version = ssl.TLSVersion.TLSv1
            ctx.maximum_version = ssl.TLSVersion.TLSv1_1
            ctx.set_ciphers("ALL:@SECLEVEL=0")
        except (ValueError, ssl.SSLError):
            self.skipTest("this OpenSSL cannot offer TLS 1.1")
        with socket.create_connection(("127.0.0.1", b.port)) as raw:
            with self.assertRaises((ssl.SSLError, ConnectionError)):
                ctx.wrap_socket(raw).do_handshake()

    def test_no_plaintext_on_a_tls_listener(self):
        b = Broker(tls=(self.cert, self.key))
        self.addCleanup(b.stop)
        b.start()
        with socket.create_connection(("127.0.0.1", b.port), timeout=5) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                data = s.recv(4096)
            except (ConnectionError, socket.timeout):
                data = b""
        self.assertNotIn(b"200", data)
        self.assertNotIn(b"status", data)

    def test_unreadable_key_is_a_startup_error(self):
        b = Broker(tls=(self.cert, "/nonexistent/tls.key"))
        self.addCleanup(b.stop)
        r = subprocess.run([MCPBROKER, "-d", "-f", b.conf],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 1)
        self.assertIn('tls key "/nonexistent/tls.key"', r.stderr)

    def test_key_not_matching_certificate_fails_closed(self):
        other_cert, other_key = make_cert(tempfile.mkdtemp(dir=self.tmp.name))
        b = Broker(tls=(self.cert, other_key))
        self.addCleanup(b.stop)
        r = subprocess.run([MCPBROKER, "-d", "-f", b.conf],
                           capture_output=True, text=True, timeout=15)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot set up TLS", r.stderr)


if __name__ == "__main__":
    unittest.main()
