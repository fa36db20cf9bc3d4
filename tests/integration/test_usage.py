"""Metering and budgets through the real daemon, against the fake LLM's
scripted token counts: a warning at 80%, 429 at 100% (also mid-turn, on
the stream), each audited once a period and not again after a restart;
rows of earlier periods (written with Python's sqlite3) that do not
count; estimates marked when a provider counts nothing; totals that are
the sum of the rows."""
import datetime
import json
import os
import sqlite3
import threading
import unittest
from decimal import Decimal

from broker import Broker, wait_for
from llmfixtures import KEY, PROVIDERS, FakeLLM
from test_conversations import Client, restart, sqlite


def today():
    return datetime.datetime.now(datetime.timezone.utc).date()


def tomorrow_midnight():
    return (today() + datetime.timedelta(days=1)).isoformat() + \
        "T00:00:00Z"


class UsageBase(unittest.TestCase):
    budgets = ""

    def setUp(self):
        self.llm = FakeLLM()
        self.addCleanup(self.llm.stop)
        os.environ["FAKE_LLM_KEY"] = KEY
        self.b = Broker('auth { api-keys }\n'
                        'provider "llm" { %s price input 1 output 2 }\n'
                        'provider "local" { %s }\n%s'
                        % (PROVIDERS["openai"] % self.llm.port,
                           PROVIDERS["ollama"] % self.llm.port,
                           self.budgets))
        self.addCleanup(self.b.stop)
        self.b.start()

    def user(self, name, *opts):
        r = self.b.ctl("user", "add", *opts, name)
        return Client(self.b, r.stdout.strip().splitlines()[-1])

    def seed(self, day, user, tenant, tokens, model="gpt-4o-mini"):
        """An aggregate row as an earlier day's calls would have left it."""
        db = sqlite3.connect(os.path.join(self.b.dir, "state",
                                          "mcpbroker.db"), timeout=10)
        with db:
            db.execute("INSERT INTO usage_daily VALUES (?, ?, ?, 'llm', ?, "
                       "1, ?, 0, 0, 0, 0)",
                       (day.isoformat(), tenant, user, model, tokens))
        db.close()


class BudgetTest(UsageBase):
    budgets = 'budget user "alice" daily-tokens 100\n'

    def test_warning_at_80_then_429_at_100(self):
        alice = self.user("alice", "-t", "acme")
        alice.connect()
        usage = {"usage": {"input": 30, "output": 10}}
        self.llm.script(dict(usage, text="one"), dict(usage, text="two"),
                        dict(usage, text="three"))
        status, events = alice.chat("first")
        self.assertNotIn("budget_warning", [e for e, _ in events])
        status, events = alice.chat("second")		# 80 of 100
        warnings = [d for e, d in events if e == "budget_warning"]
        self.assertEqual(warnings, [{
            "scope": "user", "name": "alice", "metric": "daily-tokens",
            "used": 80, "limit": 100, "resets_at": tomorrow_midnight()}])
        self.assertEqual(events[-1][0], "final")
        names = [e for e, _ in events]
        self.assertLess(names.index("budget_warning"), names.index("final"))
        status, events = alice.chat("third")		# 120: the limit
        self.assertEqual([d["used"] for e, d in events
                          if e == "budget_warning"], [120])
        self.assertEqual(events[-1][0], "final")
        # Now every chat is refused before anything is sent.
        sent = len(self.llm.requests())
        for streaming in (True, False):
            status, doc = alice.chat("fourth", streaming=streaming)
            self.assertEqual(status, 429, doc)
            self.assertEqual(doc["error"]["code"], "budget_exceeded")
            for k, v in (("scope", "user"), ("name", "alice"),
                         ("metric", "daily-tokens"), ("used", 120),
                         ("limit", 100),
                         ("resets_at", tomorrow_midnight())):
                self.assertEqual(doc["error"][k], v)
        self.assertEqual(len(self.llm.requests()), sent)
        # The conversation is kept, without the refused message.
        _, hist = alice.call("GET", "/llmchat/history")
        self.assertEqual([m["content"] for m in hist["messages"]
                          if m["role"] == "user"],
                         ["first", "second", "third"])
        audit = sqlite(self.b, "SELECT detail FROM audit WHERE kind = "
                       "'budget' ORDER BY id").splitlines()
        self.assertEqual(len(audit), 2)
        self.assertIn('"budget_warning"', audit[0])
        self.assertIn('"budget_exceeded"', audit[1])
        # A restart does not say it again, nor let her through.
        restart(self.b)
        alice.connect()
        status, doc = alice.chat("fifth")
        self.assertEqual(status, 429)
        self.assertEqual(sqlite(self.b, "SELECT COUNT(*) FROM audit WHERE "
                                "kind = 'budget'"), "2")
        # Someone else has their own day.
        bob = self.user("bob", "-t", "acme")
        bob.connect()
        self.llm.script({"text": "hi bob"})
        status, events = bob.chat("hello")
        self.assertEqual(events[-1][0], "final")

    def test_budget_used_up_mid_turn(self):
        alice = self.user("alice", "-t", "acme")
        cid = alice.connect()["conversation_id"]
        self.llm.script({"tool_calls": [{"name": "nope__tool",
                                         "arguments": {}}],
                         "usage": {"input": 90, "output": 20}},
                        {"text": "never sent"})
        status, events = alice.chat("use a tool")
        self.assertEqual(status, 200)
        names = [e for e, _ in events]
        self.assertEqual(names[-1], "error")
        self.assertIn("budget_warning", names)
        err = events[-1][1]
        self.assertEqual(err["code"], "budget_exceeded")
        self.assertEqual((err["scope"], err["name"], err["used"],
                          err["limit"]), ("user", "alice", 110, 100))
        self.assertEqual(err["resets_at"], tomorrow_midnight())
        self.assertEqual(len(self.llm.requests()), 1)
        # The turn ended cleanly: the call has its result, all stored.
        _, doc = alice.call("GET", "/api/v1/conversations/" + cid)
        self.assertEqual([m["role"] for m in doc["messages"]],
                         ["user", "assistant", "tool"])


class PricedModelTest(UsageBase):
    def test_a_priced_provider_keeps_its_model(self):
        """The price is the configured model's: a dearer model chosen at
        connect would be counted at the cheaper one's price."""
        alice = self.user("alice")
        status, doc = alice.call("POST", "/llmchat/connect",
                                 {"provider": "llm", "model": "gpt-4o"})
        self.assertEqual((status, doc["error"]["code"]),
                         (422, "invalid_field"), doc)
        self.assertIn('priced for its model "gpt-4o-mini" only',
                      doc["error"]["message"])
        self.assertEqual(alice.connect(model="gpt-4o-mini")["model"],
                         "gpt-4o-mini")
        # an unpriced provider counts tokens only: any model
        self.assertEqual(alice.connect(provider="local",
                                       model="llama3.2")["model"],
                         "llama3.2")


class StoppedEarlyTest(UsageBase):
    def test_a_turn_stopped_before_its_answer_is_counted(self):
        """The provider has the prompt once the request went out: a stop
        before the answer began is metered (estimated), or a user could
        send long prompts and stop each one for free."""
        alice = self.user("alice")
        alice.connect()
        self.llm.script({"delay_ms": 3000, "text": "late"})
        got = {}
        t = threading.Thread(target=lambda: got.update(
            r=alice.chat("x" * 4000)))
        t.start()
        wait_for(lambda: self.llm.requests(), timeout=10,
                 what="the request at the provider")
        status, doc = alice.call("POST", "/llmchat/stop", {})
        self.assertEqual(status, 200, doc)
        t.join(30)
        row = sqlite(self.b, "SELECT COUNT(*), SUM(input_tokens) >= 1000, "
                     "MIN(estimated) FROM usage WHERE user = 'alice'")
        self.assertEqual(row, "1|1|1")


class TimedOutEarlyTest(UsageBase):
    budgets = "limits { llm-timeout 1s }\n"

    def test_a_round_that_timed_out_before_its_answer_is_counted(self):
        alice = self.user("alice")
        alice.connect()
        self.llm.script({"delay_ms": 3000, "text": "late"})
        status, doc = alice.chat("x" * 4000, streaming=False)
        self.assertEqual((status, doc["error"]["code"]),
                         (504, "provider_timeout"), doc)
        row = sqlite(self.b, "SELECT COUNT(*), SUM(input_tokens) >= 1000, "
                     "MIN(estimated) FROM usage WHERE user = 'alice'")
        self.assertEqual(row, "1|1|1")


class RolloverTest(UsageBase):
    budgets = ('budget user "alice" daily-tokens 100\n'
               'budget tenant "acme" monthly-tokens 1000\n')

    def test_earlier_periods_do_not_count(self):
        alice = self.user("alice", "-t", "acme")
        first = today().replace(day=1)
        # Yesterday's day, last month's month: over, and not counted.
        self.seed(today() - datetime.timedelta(days=1), "alice", "acme",
                  500)
        self.seed(first - datetime.timedelta(days=1), "alice", "acme",
                  100000, model="last-month")
        alice.connect()
        self.llm.script({"text": "allowed", "usage": {"input": 5,
                                                      "output": 5}})
        status, events = alice.chat("hello")
        self.assertEqual(events[-1][0], "final", events)
        _, doc = alice.call("GET", "/api/v1/usage")
        used = {(b["scope"], b["metric"]): b["used"] for b in doc["budgets"]}
        self.assertEqual(used[("user", "daily-tokens")], 10)
        self.assertEqual(used[("tenant", "monthly-tokens")],
                         10 + (500 if today().day > 1 else 0))
        # This month's rows do count for the tenant: anyone of it.
        self.seed(today(), "zoe", "acme", 1000)
        status, doc = alice.chat("again")
        self.assertEqual(status, 429, doc)
        self.assertEqual((doc["error"]["scope"], doc["error"]["name"],
                          doc["error"]["metric"]),
                         ("tenant", "acme", "monthly-tokens"))
        nxt = (first + datetime.timedelta(days=32)).replace(day=1)
        self.assertEqual(doc["error"]["resets_at"],
                         nxt.isoformat() + "T00:00:00Z")


class UsageReportTest(UsageBase):
    def test_totals_are_the_sum_of_the_rows(self):
        alice = self.user("alice", "-t", "acme")
        bob = self.user("bob", "-t", "acme")
        tina = self.user("tina", "-t", "acme", "-r", "tenant-admin")
        alice.connect()
        self.llm.script({"text": "a", "usage": {"input": 1000,
                                                 "output": 500}},
                        {"text": "b", "usage": {"input": 7, "output": 3}})
        alice.chat("one")
        alice.chat("two")
        bob.connect(provider="local")
        self.llm.script({"text": "counted by nobody", "no_usage": True})
        status, events = bob.chat("three")
        final = events[-1][1]
        self.assertGreater(final["usage"]["input_tokens"], 0)
        # Estimated: a quarter of the bytes each way, marked as such.
        row = sqlite(self.b, "SELECT input_tokens, output_tokens, estimated "
                     "FROM usage WHERE user = 'bob'").split("|")
        self.assertEqual(row[2], "1")
        self.assertEqual(int(row[1]), (len("counted by nobody") + 3) // 4)
        self.assertEqual(int(row[0]), final["usage"]["input_tokens"])
        status, doc = alice.call("GET", "/api/v1/usage")
        self.assertEqual(status, 200, doc)
        self.assertEqual(len(doc["rows"]), 1)
        self.assertEqual(doc["rows"][0]["calls"], 2)
        # 1007 in at 1 USD/M, 503 out at 2 USD/M
        self.assertEqual(Decimal(str(doc["totals"]["cost_usd"])),
                         Decimal("0.002013"))
        # A tenant-admin sees the tenant, by user; the others may not.
        status, _, raw = self.b.request(
            "GET", "/api/v1/usage/tenant?from=%s&to=%s"
            % (today().replace(day=1), today()),
            headers={"Authorization": "Bearer " + tina.key})
        self.assertEqual(status, 200)
        doc = json.loads(raw, parse_float=Decimal)
        self.assertEqual(sorted(r["user"] for r in doc["rows"]),
                         ["alice", "bob"])
        for key in ("calls", "input_tokens", "output_tokens",
                    "estimated_calls", "tool_calls", "cost_usd"):
            self.assertEqual(sum(r[key] for r in doc["rows"]),
                             doc["totals"][key], key)
        self.assertEqual(doc["totals"]["estimated_calls"], 1)
        self.assertEqual(alice.call("GET", "/api/v1/usage/tenant")[0], 403)
        self.assertEqual(tina.call("GET", "/api/v1/usage/tenant?tenant="
                                   "other")[0], 403)
        self.assertEqual(alice.call("GET", "/api/v1/usage?from=2026-13-01")
                         [0], 422)


if __name__ == "__main__":
    unittest.main()
