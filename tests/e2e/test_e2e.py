"""The web UI in a real browser: Debian's chromium, driven headless by
playwright-core (tests/package.json), against the real daemon with the fake
LLM and server-filesystem.  This starts them and runs ui.mjs, which does
the clicking and asserts; screenshots go to $MCPBROKER_SCREENSHOTS if set."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from broker import Broker  # noqa: E402
from llmfixtures import KEY, PROVIDERS, FakeLLM  # noqa: E402
from mcpfixtures import FILESYSTEM, TESTS, node  # noqa: E402

CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or
                          "/usr/bin/chromium")


class BrowserTest(unittest.TestCase):
    def test_ui(self):
        if not os.path.exists(CHROMIUM):
            self.fail("chromium is not installed (packaging/install-deps)")
        llm = FakeLLM()
        d = tempfile.mkdtemp()
        os.chmod(d, 0o755)
        with open(os.path.join(d, "note.txt"), "w") as f:
            f.write("The vault code is 4-8-15-16-23-42.\n")
        with open(os.path.join(d, "evil.txt"), "w") as f:
            f.write("<script>alert('tool')</script><b>bold?</b>\n")
        for n in os.listdir(d):
            os.chmod(os.path.join(d, n), 0o644)
        # a second server whose tools a file says, to change one later
        d2 = tempfile.mkdtemp()
        os.chmod(d2, 0o755)
        tools = os.path.join(d2, "tools.json")
        with open(tools, "w") as f:
            json.dump({"tools": [{"name": "echo",
                                  "description": "Echoes the text back",
                                  "inputSchema": {"type": "object"}}]}, f)
        os.chmod(tools, 0o644)
        os.environ["FAKE_LLM_KEY"] = KEY
        b = Broker('auth { api-keys }\n'
                   'provider "llm" { %s }\n'
                   'server "files" { command "%s" "%s" "%s" }\n'
                   'server "mutable" { command "python3" "%s" "%s" }\n'
                   'confirm tool "files.list_directory"\n'
                   'allow role "analyst" tool "files.read_text_file"\n'
                   'allow tool "*"\n'
                   % (PROVIDERS["openai"] % llm.port, node(), FILESYSTEM, d,
                      os.path.join(TESTS, "fixtures", "mutable_mcp_server.py"),
                      tools))
        try:
            b.start()
            keys = {}
            for name, roles, tenant in (
                    ("alice", [], None), ("root", ["admin"], None),
                    ("tad", ["tenant-admin"], "acme"),
                    ("carol", ["dev"], "acme"), ("zed", ["dev"], "globex")):
                args = ["user", "add"]
                for r in roles:
                    args += ["-r", r]
                if tenant:
                    args += ["-t", tenant]
                keys[name] = b.ctl(*args, name).stdout.strip().splitlines()[-1]
            env = dict(os.environ, BASE="http://127.0.0.1:%d" % b.port,
                       LLM="http://127.0.0.1:%d" % llm.port,
                       KEYS=json.dumps(keys), DIR=d, CHROMIUM=CHROMIUM,
                       TESTS_DIR=TESTS, MUTABLE_TOOLS=tools)
            r = subprocess.run([node(), os.path.join(HERE, "ui.mjs")],
                               env=env, timeout=240, capture_output=True,
                               text=True)
            sys.stderr.write(r.stdout + r.stderr)
            self.assertEqual(r.returncode, 0, "ui.mjs failed; the daemon "
                             "said:\n" + "\n".join(b.log_lines[-40:]))
        finally:
            b.stop()
            llm.stop()
            shutil.rmtree(d, ignore_errors=True)
            shutil.rmtree(d2, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
