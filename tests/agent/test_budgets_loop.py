"""Budgets and the claude agent, in-process: the real SDK over HTTP against the scripted
Messages API, on a real store (both engines), the run driven by hand with the Run's budget
hooks wired to the store as the runtime wires them, time passed as ``now`` (so the next UTC
day is a number, not a wait). tests/agent/test_budgets_processes.py runs it with processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from wakeful.agent import BudgetReached, Run
from wakeful.agent.claude import ClaudeRun
from wakeful.agent.core import BUDGET_TIMER
from wakeful.agent.config import ConfigError, load, parse
from wakeful.agent.scripted import ScriptedModel
from store import Outcome, Store
from store.spend import DAY, Budget, Usage
from tasks.summary import incidents, render
from wakeful.web.app import create_app
from wakeful.settings import WebSettings

DAY0 = 20_500 * DAY  # a UTC midnight
T = DAY0 + 8 * 3600
NOTICE = "Out of budget for today: I will answer after midnight UTC."


def budget_table(**keys: Any) -> str:
    lines = ["", "[budget]"] + [f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"'
                                for k, v in keys.items()]
    return "\n".join(lines) + "\n"


class Wakes:
    def __init__(self, store: Store, model: ScriptedModel, config: Path) -> None:
        self.store, self.model, self.cfg = store, model, load(config)
        self.client = anthropic.Anthropic(base_url=model.base_url, api_key="test", max_retries=0, timeout=10)
        self.n = 0

    def say(self, text: str, now: int, inbox: str = "ada") -> None:
        self.n += 1
        self.store.ingest(inbox, "chat", f"m{self.n}", {"text": text}, now=now)

    def wake(self, now: int, inbox: str = "ada") -> Outcome:
        gen = self.store.acquire(inbox, "w", now=now)
        batch = self.store.claim(inbox, "w", gen, now=now)
        assert batch
        store = self.store
        run = Run(inbox, batch, gen, store.runs.memory(inbox), lambda: True,
                  _check_budget=lambda budget: store.spend.check(inbox, "w", gen, budget, now=now),
                  _count_spend=lambda budget, usage: store.spend.count(inbox, budget, usage, now=now))
        outcome = ClaudeRun(self.cfg, self.client, run).outcome()
        assert store.finish(inbox, "w", gen, [e.id for e in batch], outcome=outcome, now=now)
        assert store.release(inbox, "w", gen, now=now)
        return outcome

    def said(self, inbox: str = "ada") -> list[str]:
        return [row.body for row in self.store.outbox(inbox)]


@pytest.fixture
def wakes(store: Store, model: ScriptedModel, write_config: Any, tool_log: Path) -> Wakes:
    config = write_config()
    with config.open("a") as f:
        f.write(budget_table(inbox_tokens_per_day=1, agent_name="errands", notice=NOTICE))
    return Wakes(store, model, config)


def scrape(store: Store, now: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics of the real web app on this store."""
    app = create_app(store=store, ring=lambda inbox: None, settings=WebSettings(), clock=lambda: now)

    async def get() -> str:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://web") as client:
            r = await client.get("/metrics")
            assert r.status_code == 200
            return r.text

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(anyio.run(get)) for s in family.samples}


def test_a_reached_budget_stops_the_next_call_keeps_the_input_and_resumes_the_next_day(
        wakes: Wakes, model: ScriptedModel, store: Store) -> None:
    wakes.say('call lookup {"order": 7}', now=T)
    first = wakes.wake(now=T)
    # The tool use came back and the read ran; the call that would carry its result was
    # not made: the first call's usage reached the 1-token ceiling.
    assert len(model.requests) == 1
    assert first.messages == [] and [t.timer_id for t in first.timers] == [BUDGET_TIMER]
    assert first.timers[0].due == DAY0 + DAY
    assert all(e.status == "done" for e in store.events("ada"))  # not failed, not retried
    assert wakes.said() == [NOTICE]  # told, by the refusal itself
    usage = model.replies[0]["usage"]
    spent = {r.scope: r for r in store.spend.today("ada", now=T)}
    assert (spent["inbox"].calls, spent["inbox"].tokens) == (1, usage["input_tokens"] + usage["output_tokens"])
    assert spent["agent"].name == "errands" and spent["inbox"].refused == 1

    wakes.say("and the invoice?", now=T + 600)  # later that day: no call, not told again
    wakes.wake(now=T + 600)
    assert len(model.requests) == 1 and wakes.said() == [NOTICE]

    # The operator's incident: in /metrics and in the daily summary.
    samples = scrape(store, T + 700)
    assert samples[("wakeful_budget_reached_today", (("scope", "inbox"),))] == 1
    assert samples[("wakeful_budget_refused_calls_total", (("scope", "inbox"),))] == 2
    assert samples[("wakeful_agent_spend_today_tokens", (("agent", "errands"),))] == spent["agent"].tokens
    text = render(incidents(store, T - 1), T - 1, T + 700)
    assert text is not None and "1 daily budget(s) reached" in text and "inbox ada" in text
    assert "2 call(s) not made" in text

    # The next UTC day: the timer wakes the inbox, and the held input is answered at once.
    assert [f.inbox for f in store.run_scheduler(now=DAY0 + DAY)] == ["ada"]
    resumed = wakes.wake(now=DAY0 + DAY + 1)
    assert len(model.requests) == 2
    [reply] = [m.body if hasattr(m, "body") else m for m in resumed.messages]
    assert 'lookup: {"order": 7, "status": "shipped"}' in reply and "Noted: and the invoice?" in reply
    assert resumed.timers == []  # the refusal is not carried over
    assert "wakeful-budget" not in str(model.requests[-1]["messages"])  # the wake is not the model's input
    assert [r.day for r in store.spend.today("ada", now=DAY0 + DAY + 1)] == [DAY0 + DAY] * 2


def test_without_a_runtime_nothing_is_checked_or_counted(model: ScriptedModel, write_config: Any,
                                                       tool_log: Path, store: Store) -> None:
    """A Run made by hand (a custom loop's test) carries no budget hooks: calls go out."""
    config = write_config()
    config.write_text(config.read_text() + budget_table(inbox_tokens_per_day=1))
    cfg = load(config)
    run = Run("ada", [], 1, {})
    run.check_budget(cfg.budget)
    run.count_spend(cfg.budget, None)  # type: ignore[arg-type]
    client = anthropic.Anthropic(base_url=model.base_url, api_key="test", max_retries=0, timeout=10)
    store.ingest("ada", "chat", "1", {"text": "hi"})
    gen = store.acquire("ada", "w")
    run = Run("ada", store.claim("ada", "w", gen), gen, {})
    outcome = ClaudeRun(cfg, client, run).outcome()
    assert outcome.messages and store.spend.today("ada") == []


def test_a_count_that_cannot_be_written_does_not_fail_the_run_and_is_said_once(
        model: ScriptedModel, write_config: Any, tool_log: Path, store: Store,
        caplog: pytest.LogCaptureFixture) -> None:
    """The runtime's count (tasks/run_inbox.py HeldLease.count_spend) on a database that refuses
    every connection: tried again, then given up; the run's reply still goes out."""
    from tasks.run_inbox import COUNT_TRIES, HeldLease

    cfg = load(write_config())
    away = Store.connect("postgresql+psycopg://wakeful@127.0.0.1:1/nowhere")  # nothing listens
    store.ingest("ada", "chat", "1", {"text": "hi"})
    gen = store.acquire("ada", "w")
    lease = HeldLease(away, "ada", "w", gen, deadline=0.0)
    run = Run("ada", store.claim("ada", "w", gen), gen, {}, lambda: True,
              _check_budget=lambda budget: store.spend.check("ada", "w", gen, budget),
              _count_spend=lease.count_spend)
    client = anthropic.Anthropic(base_url=model.base_url, api_key="test", max_retries=0, timeout=10)
    with caplog.at_level("WARNING", logger="wakeful.runs"):
        outcome = ClaudeRun(cfg, client, run).outcome()
    away.dispose()
    assert outcome.messages and len(model.requests) == 1  # the reply stands; the call made once
    [warning] = [r for r in caplog.records if r.name == "wakeful.runs"]
    usage = model.replies[0]["usage"]
    said = warning.getMessage()
    assert COUNT_TRIES > 1 and warning.levelname == "WARNING" and "not counted" in said
    assert "inbox ada" in said and f"model {cfg.model}" in said
    assert f"{usage['input_tokens'] + usage['output_tokens']} tokens" in said
    assert store.spend.today("ada") == []
    with pytest.raises(ValueError):  # a bad call is a bug, raised, not a count given up
        HeldLease(store, "", "w", gen, deadline=0.0).count_spend(cfg.budget, Usage("m"))


def test_a_refusal_crosses_a_run_apart_pipe_whole() -> None:
    import pickle

    from store.spend import Verdict

    exc = pickle.loads(pickle.dumps(BudgetReached(Verdict(False, 86400, reached="inbox 'a': 5 tokens of 1"))))
    assert isinstance(exc, BudgetReached) and exc.verdict.resumes_at == 86400 and "5 tokens" in str(exc)


@pytest.mark.parametrize(("table", "error"), [
    ({"tokens": 5}, "[budget]: unknown key(s) tokens"),
    ({"inbox_tokens_per_day": 0}, "[budget] inbox_tokens_per_day must be a positive whole number of tokens, got 0"),
    ({"agent_tokens_per_day": 1.5}, "agent_tokens_per_day must be a positive whole number"),
    ({"inbox_money_per_day": "2"}, "[budget] inbox_money_per_day must be a positive amount, got '2'"),
    ({"agent_money_per_day": 1}, "a money ceiling needs a price for the model 'm': add [budget.prices.\"m\"]"),
    ({"prices": {"m": {"input": 3}}}, "[budget.prices.\"m\"]: `output` (per million tokens) is required"),
    ({"prices": {"m": {"input": 3, "output": -1}}}, "output must be a price >= 0 per million tokens, got -1"),
    ({"prices": {"m": {"input": 3, "output": 1, "cached": 1}}}, "unknown key(s) cached"),
    ({"agent_name": ""}, "[budget] agent_name must be a non-empty string"),
    ({"notice": 3}, "[budget] notice must be a non-empty string"),
])
def test_a_bad_budget_table_is_one_line_naming_file_table_and_key(table: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse({"agent": {"model": "m"}, "budget": table}, "agent.toml")
    assert str(caught.value).startswith("agent.toml: ") and error in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_budget_table_and_its_defaults() -> None:
    cfg = parse({"agent": {"model": "m"}, "budget": {
        "inbox_tokens_per_day": 1000, "agent_money_per_day": 20, "agent_name": "support",
        "prices": {"m": {"input": 3, "output": 15}, "other": {"input": 1, "output": 2, "cache_read": 0.05}}}})
    budget = cfg.budget
    assert (budget.agent, budget.inbox_tokens, budget.inbox_money, budget.agent_money) == ("support", 1000, None, 20.0)
    assert budget.prices["other"].cache_read == 0.05 and budget.limited()
    assert parse({"agent": {"model": "m"}}).budget == Budget(agent="claude")  # counted, never refused
    assert not parse({"agent": {"model": "m"}}).budget.limited()


def test_wakeful_status_shows_todays_spend_against_the_ceilings(store: Store, db_url: str) -> None:
    """``wakeful status INBOX`` (the real command, on the database clock's today)."""
    from typer.testing import CliRunner

    from wakeful.cli.main import cli
    from store.spend import Price

    budget = Budget(agent="errands", inbox_tokens=1000, inbox_money=0.5, agent_tokens=10_000,
                    prices={"m": Price(input=3.0, output=15.0)})
    store.spend.count("ada", budget, Usage("m", input_tokens=1200, output_tokens=34))
    store.spend.count("bob", budget, Usage("m", input_tokens=10))
    gen = store.acquire("ada", "w")
    assert not store.spend.check("ada", "w", gen, budget).allowed

    def wakeful(*args: str) -> str:
        result = CliRunner().invoke(cli, list(args), env={"WAKEFUL_DATABASE_URL": db_url}, catch_exceptions=False)
        assert result.exit_code == 0, result.stdout
        return result.stdout

    out = wakeful("status", "ada")
    assert "this inbox: 1,234 tokens of 1,000 in 1 call(s) today (UTC); 0.0041 of 0.5000" in out
    assert "budget reached: 1 call(s) not made since" in out and "the user was told at" in out
    assert "agent errands: 1,244 tokens of 10,000 in 2 call(s) today (UTC)" in out
    data = json.loads(wakeful("status", "ada", "--json"))
    assert [(r["scope"], r["input_tokens"] + r["output_tokens"], r["refused"]) for r in data["spend_today"]] == [
        ("inbox", 1234, 1), ("agent", 1244, 0)]
    assert "spend today (UTC): agent errands: 1,244 tokens in 2 call(s)" in wakeful("status")
    assert "budgets reached today: 1 inbox(es), 0 agent(s)" in wakeful("status")
