"""The worker's MCP client over stdio, driven through `mcpbrokerctl mcp`,
against real servers from npm, the SDK v2 fixture (2026-07-28) and hostile
fixtures."""
import base64
import os
import shutil
import tempfile
import time
import unittest

from mcpfixtures import (FILESYSTEM, ctl_mcp, everything_cmd, hostile_cmd,
                         node, v2_cmd)


def texts(result):
    return [c["text"] for c in result["content"] if c["type"] == "text"]


class EverythingStdioTest(unittest.TestCase):
    """server-everything, 2025 era, over stdio."""

    def test_tools_listed(self):
        r = ctl_mcp("tools", everything_cmd())
        self.assertEqual(r.returncode, 0, r.stderr)
        names = [t["name"] for t in r.json()["tools"]]
        for want in ("echo", "get-sum", "get-tiny-image",
                     "get-structured-content", "get-resource-links"):
            self.assertIn(want, names)
        self.assertIn("legacy era", r.stderr)

    def test_echo(self):
        r = ctl_mcp("call", everything_cmd(), "echo", '{"message":"hi"}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(texts(r.json()), ["Echo: hi"])

    def test_image_content(self):
        r = ctl_mcp("call", everything_cmd(), "get-tiny-image", "{}")
        self.assertEqual(r.returncode, 0, r.stderr)
        images = [c for c in r.json()["content"] if c["type"] == "image"]
        self.assertEqual(len(images), 1)
        self.assertEqual(images[0]["mimeType"], "image/png")
        self.assertTrue(base64.b64decode(images[0]["data"]).startswith(
            b"\x89PNG"))

    def test_structured_content(self):
        r = ctl_mcp("call", everything_cmd(), "get-structured-content",
                    '{"location":"New York"}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("structuredContent", r.json())

    def test_resource_links(self):
        r = ctl_mcp("call", everything_cmd(), "get-resource-links",
                    '{"count":2}')
        self.assertEqual(r.returncode, 0, r.stderr)
        kinds = [c["type"] for c in r.json()["content"]]
        self.assertIn("resource_link", kinds)

    def test_unknown_tool_is_an_error_result_or_error(self):
        r = ctl_mcp("call", everything_cmd(), "no-such-tool", "{}")
        if r.returncode == 0:
            self.assertTrue(r.json().get("isError"))
        else:
            self.assertIn("no-such-tool", r.stderr.lower() + r.stdout)


class FilesystemStdioTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        with open(os.path.join(self.dir, "note.txt"), "w") as f:
            f.write("the quick brown fox\n")

    def test_read_file(self):
        r = ctl_mcp("call", [node(), FILESYSTEM, self.dir], "read_file",
                    '{"path":"%s/note.txt"}' % self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("the quick brown fox", "".join(texts(r.json())))

    def test_outside_allowed_directory_is_refused(self):
        r = ctl_mcp("call", [node(), FILESYSTEM, self.dir], "read_file",
                    '{"path":"/etc/passwd"}')
        out = r.stdout + r.stderr
        self.assertNotIn("root:x:0:0", out)


class ModernStdioTest(unittest.TestCase):
    """The 2026-07-28 fixture on the SDK v2: no handshake, _meta per request."""

    def test_discovered_as_modern_and_paginated(self):
        r = ctl_mcp("tools", v2_cmd("stdio"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("modern era, protocol 2026-07-28", r.stderr)
        names = [t["name"] for t in r.json()["tools"]]
        # 30 generated tools plus the named ones, over several pages.
        self.assertGreaterEqual(len(names), 39)
        self.assertEqual(len(names), len(set(names)))
        self.assertIn("t29", names)

    def test_structured_and_every_content_type(self):
        r = ctl_mcp("call", v2_cmd("stdio"), "add", '{"a":2,"b":40}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.json()["structuredContent"], {"sum": 42})
        for tool, kind in (("image", "image"), ("audio", "audio"),
                           ("resource_link", "resource_link"),
                           ("embedded", "resource")):
            r = ctl_mcp("call", v2_cmd("stdio"), tool, "{}")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(kind, [c["type"] for c in r.json()["content"]],
                          tool)

    def test_is_error_is_a_result(self):
        r = ctl_mcp("call", v2_cmd("stdio"), "fail", "{}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.json()["isError"])

    def test_progress_is_relayed(self):
        r = ctl_mcp("call", v2_cmd("stdio"), "slow", '{"ms":300}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("progress 1/3 step 1/3", r.stderr)
        self.assertIn("progress 3/3 step 3/3", r.stderr)
        self.assertEqual(texts(r.json()), ["slept 300 ms"])

    def test_slow_call_times_out(self):
        start = time.monotonic()
        r = ctl_mcp("call", v2_cmd("stdio"), "slow", '{"ms":60000}',
                    timeout_ms=1000)
        self.assertEqual(r.returncode, 1)
        self.assertIn("tools/call timed out after 1000 ms", r.stderr)
        self.assertLess(time.monotonic() - start, 15)


class HostileStdioTest(unittest.TestCase):
    def test_garbage_lines_are_skipped(self):
        r = ctl_mcp("call", hostile_cmd("garbage"), "echo", '{"text":"x"}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("not valid JSON", r.stderr)

    def test_not_jsonrpc_is_ignored(self):
        r = ctl_mcp("tools", hostile_cmd("not-jsonrpc"), timeout_ms=3000)
        self.assertIn("JSON-RPC", r.stderr)

    def test_wrong_ids_do_not_match(self):
        r = ctl_mcp("tools", hostile_cmd("wrong-id"), timeout_ms=2000,
                    wall=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("unknown request id", r.stderr)

    def test_silent_server_times_out(self):
        r = ctl_mcp("tools", hostile_cmd("silent"), timeout_ms=2000,
                    wall=90)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"(timed out|no MCP handshake)")

    def test_exit_mid_call_names_the_status(self):
        r = ctl_mcp("call", hostile_cmd("exit-mid-call"), "echo",
                    '{"text":"x"}')
        self.assertEqual(r.returncode, 1)
        self.assertIn("the server exited with status 3", r.stderr)

    def test_huge_line_is_refused_with_bounded_memory(self):
        r = ctl_mcp("tools", hostile_cmd("huge-line"), wall=120)
        self.assertEqual(r.returncode, 1)
        self.assertIn("line longer than 16777216 bytes", r.stderr)
        # 100 MB were sent; the client kept at most about one cap's worth.
        self.assertLess(r.peak_rss_kb, 120 * 1024)

    def test_stderr_flood_is_rate_limited(self):
        r = ctl_mcp("call", hostile_cmd("flood-stderr"), "echo",
                    '{"text":"x"}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLess(r.stderr.count("stderr:"), 60)

    def test_cancellation_reaches_the_server(self):
        log = tempfile.NamedTemporaryFile(delete=False)
        log.close()
        self.addCleanup(os.unlink, log.name)
        env = dict(os.environ, HOSTILE_LOG=log.name)
        r = ctl_mcp("call", hostile_cmd("slow-call"), "slow", "{}",
                    timeout_ms=1000, env_names=["HOSTILE_LOG"], env=env)
        self.assertEqual(r.returncode, 1)
        with open(log.name) as f:
            self.assertIn("cancelled", f.read())

    def test_command_that_does_not_exist(self):
        r = ctl_mcp("tools", ["/nonexistent/mcp-server"])
        self.assertEqual(r.returncode, 1)
        self.assertIn('cannot execute "/nonexistent/mcp-server": No such '
                      'file or directory', r.stderr)

    def test_environment_is_scrubbed(self):
        env = dict(os.environ, MCPBROKER_TEST_SECRET="sk-do-not-leak")
        r = ctl_mcp("call", everything_cmd(), "get-env", "{}", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("sk-do-not-leak", r.stdout)
        self.assertNotIn("MCPBROKER_TEST_SECRET", r.stdout)


if __name__ == "__main__":
    unittest.main()
