"""The fake LLM server (tests/fixtures/fake_llm.py) and an SSE reader."""
import http.client
import json
import os
import subprocess
import urllib.request

from mcpfixtures import FIXTURES

FAKE_LLM = os.path.join(FIXTURES, "fake_llm.py")
KEY = "sk-test-0123456789abcdef"

# How each provider type is configured against the fake.
PROVIDERS = {
    "openai": 'type openai base-url "http://127.0.0.1:%d/v1" '
              'api-key-env "FAKE_LLM_KEY" model "gpt-4o-mini"',
    "azure-openai": 'type azure-openai base-url "http://127.0.0.1:%d" '
                    'deployment "gpt-4o" api-version "2024-10-21" '
                    'api-key-env "FAKE_LLM_KEY"',
    "openai-compatible": 'type openai-compatible base-url '
                         '"http://127.0.0.1:%d/v1" api-key-env "FAKE_LLM_KEY" '
                         'model "llama-3"',
    "anthropic": 'type anthropic base-url "http://127.0.0.1:%d" '
                 'api-key-env "FAKE_LLM_KEY" model "claude-sonnet-4-5"',
    "ollama": 'type ollama base-url "http://127.0.0.1:%d" model "llama3.1"',
    "gemini": 'type gemini base-url "http://127.0.0.1:%d" '
              'api-key-env "FAKE_LLM_KEY" model "gemini-2.5-flash"',
}


class FakeLLM:
    def __init__(self, key=KEY):
        self.proc = subprocess.Popen(
            ["python3", FAKE_LLM, "--port", "0", "--key", key],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("PORT="):
            self.stop()
            raise AssertionError("fake LLM did not start: %r" % line)
        self.port = int(line.split("=", 1)[1])

    def _call(self, method, path, body=None):
        req = urllib.request.Request(
            "http://127.0.0.1:%d%s" % (self.port, path), method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            data = r.read()
        return json.loads(data) if data else None

    def script(self, *steps):
        self._call("POST", "/_script", {"steps": list(steps)})

    def requests(self):
        return self._call("GET", "/_requests")

    def reset(self):
        self._call("POST", "/_reset", {})

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)
        self.proc.stdout.close()


def sse_events(port, path, body, timeout=60, on_open=None):
    """POST and read the SSE stream: [(event, data)], or (status, json)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.getheader("Content-Type", "").startswith("application/json"):
        doc = json.loads(r.read())
        conn.close()
        return r.status, doc
    events, event, data = [], None, []
    if on_open is not None:
        on_open(conn)
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode().rstrip("\r\n")
        if line == "":
            if event is not None:
                events.append((event, json.loads("\n".join(data))))
            event, data = None, []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    conn.close()
    return r.status, events
