"""The worker's MCP client over streamable HTTP (both eras) and the legacy
HTTP+SSE transport, driven through `mcpbrokerctl mcp`."""
import time
import unittest

from mcpfixtures import ctl_mcp, everything_http, v2_http


def texts(result):
    return [c["text"] for c in result["content"] if c["type"] == "text"]


class StreamableHttp2025Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = everything_http("streamableHttp")
        cls.url = "http://127.0.0.1:%d/mcp" % cls.server.port

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_tools_and_call_with_session(self):
        r = ctl_mcp("tools", self.url)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("legacy era", r.stderr)
        self.assertIn("echo", [t["name"] for t in r.json()["tools"]])
        r = ctl_mcp("call", self.url, "echo", '{"message":"over http"}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(texts(r.json()), ["Echo: over http"])

    def test_image_over_sse_responses(self):
        r = ctl_mcp("call", self.url, "get-tiny-image", "{}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("image", [c["type"] for c in r.json()["content"]])

    def test_wrong_path_is_a_clear_error(self):
        # Hosted servers put secrets in the path or query: an error names
        # the origin only (it reaches /readyz, users and models).
        r = ctl_mcp("tools", "http://127.0.0.1:%d/nope/s3cr3t?key=k3y"
                    % self.server.port)
        self.assertEqual(r.returncode, 1)
        self.assertIn("HTTP 404 from http://127.0.0.1:%d" % self.server.port,
                      r.stderr)
        self.assertNotIn("s3cr3t", r.stderr)
        self.assertNotIn("k3y", r.stderr)


class LegacySseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = everything_http("sse")
        cls.url = "http://127.0.0.1:%d/sse" % cls.server.port

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_tools_and_call(self):
        r = ctl_mcp("tools", "--sse", self.url)
        # --sse is an option of mcp; ctl_mcp puts the target first.
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("echo", [t["name"] for t in r.json()["tools"]])
        r = ctl_mcp("call", "--sse", self.url, "echo",
                    '{"message":"over sse"}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(texts(r.json()), ["Echo: over sse"])


class StreamableHttp2026Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = v2_http()
        cls.url = "http://127.0.0.1:%d/mcp" % cls.server.port

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_modern_era_pagination_and_structured_content(self):
        r = ctl_mcp("tools", self.url)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("modern era, protocol 2026-07-28", r.stderr)
        self.assertGreaterEqual(len(r.json()["tools"]), 39)
        r = ctl_mcp("call", self.url, "add", '{"a":20,"b":22}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.json()["structuredContent"], {"sum": 42})

    def test_is_error_result(self):
        r = ctl_mcp("call", self.url, "fail", "{}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.json()["isError"])

    def test_slow_call_times_out_and_closes_the_stream(self):
        start = time.monotonic()
        r = ctl_mcp("call", self.url, "slow", '{"ms":60000}',
                    timeout_ms=1000)
        self.assertEqual(r.returncode, 1)
        self.assertIn("timed out", r.stderr)
        self.assertLess(time.monotonic() - start, 15)


class UnreachableTest(unittest.TestCase):
    def test_connection_refused_is_precise(self):
        from broker import free_port
        r = ctl_mcp("tools", "http://127.0.0.1:%d/mcp" % free_port())
        self.assertEqual(r.returncode, 1)
        self.assertIn("Connection refused", r.stderr)


if __name__ == "__main__":
    unittest.main()
