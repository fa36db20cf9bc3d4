"""GET /metrics: who may scrape it, the exposition format, and counters
that move by exactly what a chat with tools did."""

import json
import os
import re
import unittest

from broker import Broker
from llmfixtures import KEY, PROVIDERS, FakeLLM
from mcpfixtures import HOSTILE

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
VALUE = r"(?:[-+]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|Inf|NaN))"


def parse_labels(text, lineno):
    """{a="x",b="y"} -> dict, with the text format's escapes undone."""
    labels, i = {}, 1
    while text[i] != "}":
        m = re.compile(LABEL + '="').match(text, i)
        if m is None:
            raise ValueError("line %d: bad label at %r" % (lineno, text[i:]))
        name, i, value = m.group()[:-2], m.end(), ""
        while text[i] != '"':
            if text[i] == "\\":
                esc = text[i + 1]
                if esc not in '\\"n':
                    raise ValueError("line %d: bad escape \\%s"
                                     % (lineno, esc))
                value += "\n" if esc == "n" else esc
                i += 2
            elif text[i] == "\n":
                raise ValueError("line %d: raw newline" % lineno)
            else:
                value += text[i]
                i += 1
        i += 1
        if name in labels:
            raise ValueError("line %d: label %s twice" % (lineno, name))
        labels[name] = value
        if text[i] == ",":
            i += 1
    return labels, i + 1


def parse_exposition(text):
    """A strict reader of the Prometheus text format: HELP and TYPE once
    per metric and before its samples, every sample of a declared metric,
    no series twice.  {(name, frozenset(labels)): value}, {name: type}."""
    samples, types, helped, seen = {}, {}, set(), set()
    if not text.endswith("\n"):
        raise ValueError("no final newline")
    for n, line in enumerate(text[:-1].split("\n"), 1):
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            if not re.fullmatch(NAME, name) or name in helped:
                raise ValueError("line %d: HELP %s" % (n, name))
            helped.add(name)
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            if (name in types or name in seen or kind not in
                    ("counter", "gauge", "histogram", "summary", "untyped")):
                raise ValueError("line %d: TYPE %s" % (n, line))
            types[name] = kind
            continue
        if line.startswith("#") or line == "":
            raise ValueError("line %d: %r" % (n, line))
        m = re.match(NAME, line)
        name = m.group()
        rest = line[m.end():]
        labels = {}
        if rest.startswith("{"):
            try:
                labels, end = parse_labels(rest, n)
            except IndexError:
                raise ValueError("line %d: unterminated labels" % n)
            rest = rest[end:]
        if not re.fullmatch(" " + VALUE, rest):
            raise ValueError("line %d: value %r" % (n, rest))
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        family = name if name in types else base
        if family not in types or family not in helped:
            raise ValueError("line %d: %s has no TYPE or HELP" % (n, name))
        if types[family] == "histogram" and name == family:
            raise ValueError("line %d: bare histogram sample" % n)
        if types[family] != "histogram" and name != family:
            raise ValueError("line %d: %s is not %s" % (n, name, family))
        seen.add(family)
        key = (name, frozenset(labels.items()))
        if key in samples:
            raise ValueError("line %d: series twice" % n)
        samples[key] = float(rest)
    return samples, types


def total(samples, name, **want):
    """The sum of name's series whose labels include want."""
    return sum(v for (n, labels), v in samples.items() if n == name and
               all((k, w) in labels for k, w in want.items()))


class ParserTest(unittest.TestCase):
    """The test's reader refuses what Prometheus would."""

    def test_refusals(self):
        good = '# HELP a_total x\n# TYPE a_total counter\na_total{l="\\"\\n\\\\"} 1\n'
        samples, _ = parse_exposition(good)
        self.assertEqual(total(samples, "a_total", l='"\n\\'), 1)
        for bad in ('a_total 1\n',
                    '# HELP a_total x\n# TYPE a_total counter\na_total{l="\\x"} 1\n',
                    '# HELP a_total x\n# TYPE a_total counter\na_total{l="x} 1\n',
                    '# HELP a_total x\n# TYPE a_total counter\na_total 1\n'
                    '# TYPE a_total counter\n',
                    '# HELP a_total x\n# TYPE a_total counter\na_total one\n',
                    '# HELP a_total x\n# TYPE a_total counter\na_total 1\na_total 2\n'):
            with self.assertRaises((ValueError, AttributeError), msg=bad):
                parse_exposition(bad)


class MetricsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.llm = FakeLLM()
        os.environ["FAKE_LLM_KEY"] = KEY
        cls.b = Broker(
            'auth { api-keys }\n'
            'provider "llm" { %s }\n'
            'server "echo" { command "python3" "%s" "ok" }\n'
            'deny tool "echo.echo" where text equals "forbidden"\n'
            'allow tool "*"\n' % (PROVIDERS["openai"] % cls.llm.port,
                                  HOSTILE))
        cls.b.start()
        cls.admin = {"Authorization": "Bearer " + cls.b.ctl(
            "user", "add", "-r", "admin", "alice").stdout.split()[-1]}
        cls.dev = {"Authorization": "Bearer " + cls.b.ctl(
            "user", "add", "-r", "dev", "bob").stdout.split()[-1]}
        status, _, _ = cls.b.request("POST", "/llmchat/connect",
                                     '{"provider":"llm"}', cls.admin)
        assert status == 200

    @classmethod
    def tearDownClass(cls):
        cls.b.stop()
        cls.llm.stop()

    def scrape(self):
        status, headers, data = self.b.request("GET", "/metrics",
                                               headers=self.admin)
        self.assertEqual(status, 200, data)
        self.assertEqual(headers["Content-Type"],
                         "text/plain; version=0.0.4; charset=utf-8")
        return parse_exposition(data.decode())

    def audit_rows(self):
        return len([line for line in self.b.ctl(
            "audit", "export", "--format", "jsonl").stdout.split("\n")
            if line])

    def test_access(self):
        status, _, _ = self.b.request("GET", "/metrics")
        self.assertEqual(status, 401)
        status, _, data = self.b.request("GET", "/metrics", headers=self.dev)
        self.assertEqual(status, 403)
        self.assertEqual(json.loads(data)["error"]["code"], "forbidden")
        status, _, _ = self.b.request("POST", "/metrics", "{}", self.admin)
        self.assertEqual(status, 405)

    def test_format(self):
        samples, types = self.scrape()
        for name, kind in (
                ("mcpbroker_http_requests_total", "counter"),
                ("mcpbroker_sse_streams_open", "gauge"),
                ("mcpbroker_llm_calls_total", "counter"),
                ("mcpbroker_llm_tokens_total", "counter"),
                ("mcpbroker_llm_call_duration_seconds", "histogram"),
                ("mcpbroker_tool_calls_total", "counter"),
                ("mcpbroker_tool_call_duration_seconds", "histogram"),
                ("mcpbroker_policy_denials_total", "counter"),
                ("mcpbroker_budget_rejections_total", "counter"),
                ("mcpbroker_worker_restarts_total", "counter"),
                ("mcpbroker_server_state", "gauge"),
                ("mcpbroker_audit_rows_total", "counter"),
                ("mcpbroker_audit_commit_duration_seconds", "histogram")):
            self.assertEqual(types.get(name), kind, name)
        self.assertEqual(total(samples, "mcpbroker_server_state",
                               server="echo", state="ready"), 1)
        self.assertEqual(total(samples, "mcpbroker_server_state",
                               server="echo"), 1)

    def test_a_chat_with_tools(self):
        before, _ = self.scrape()
        rows_before = self.audit_rows()
        self.llm.reset()
        self.llm.script({"tool_calls": [
                            {"name": "echo__echo", "arguments": {"text": "hi"}},
                            {"name": "echo__echo",
                             "arguments": {"text": "forbidden"}}],
                         "usage": {"input": 11, "output": 7}},
                        {"text": "done", "usage": {"input": 13, "output": 5}})
        status, _, data = self.b.request(
            "POST", "/llmchat/chat",
            json.dumps({"message": "go", "streaming": False}),
            dict(self.admin, **{"Content-Type": "application/json"}),
            timeout=30)
        self.assertEqual(status, 200, data)
        rows = self.audit_rows() - rows_before
        after, _ = self.scrape()

        def delta(name, **labels):
            return total(after, name, **labels) - total(before, name,
                                                        **labels)

        # The chat, and the first scrape (counted once it was answered).
        self.assertEqual(delta("mcpbroker_http_requests_total",
                               route="/llmchat/", status="200"), 1)
        self.assertEqual(delta("mcpbroker_http_requests_total",
                               route="/metrics", status="200"), 1)
        self.assertEqual(delta("mcpbroker_llm_calls_total", provider="llm",
                               outcome="ok"), 2)
        self.assertEqual(delta("mcpbroker_llm_calls_total"), 2)
        self.assertEqual(delta("mcpbroker_llm_call_duration_seconds_count",
                               provider="llm"), 2)
        self.assertEqual(delta("mcpbroker_llm_tokens_total", provider="llm",
                               direction="input"), 24)
        self.assertEqual(delta("mcpbroker_llm_tokens_total", provider="llm",
                               direction="output"), 12)
        self.assertEqual(delta("mcpbroker_tool_calls_total", server="echo",
                               tool="echo", outcome="ok"), 1)
        self.assertEqual(delta("mcpbroker_tool_calls_total"), 1)
        self.assertEqual(delta("mcpbroker_tool_call_duration_seconds_count",
                               server="echo"), 1)
        self.assertEqual(delta("mcpbroker_policy_denials_total",
                               kind="tool"), 1)
        self.assertEqual(delta("mcpbroker_budget_rejections_total"), 0)
        # Two intents and one outcome, as the trail grew.
        self.assertEqual(rows, 3)
        self.assertEqual(delta("mcpbroker_audit_rows_total"), rows)
        self.assertEqual(delta("mcpbroker_audit_rows_total",
                               kind="tool_call"), 2)
        self.assertGreaterEqual(delta(
            "mcpbroker_audit_commit_duration_seconds_count"), 1)
        self.assertEqual(total(after, "mcpbroker_sse_streams_open"), 0)


if __name__ == "__main__":
    unittest.main()
