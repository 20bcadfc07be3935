"""The day's budget and every loop on the tool kit (wakeful/agent/kit.py: ``model_call``,
``spent``, ``stopped``), in process on a real store (both engines), time passed as ``now`` so
the spent day is yesterday and the next one today: the custom loop by hand, Pydantic AI, the OpenAI
Agents SDK and LangGraph through their integrations, each with its framework's own test model.

With the inbox's day spent: no model call (no tool the model would call runs), nothing said
but the store's notice (once), nothing proposed, the loop's own state untouched, the resume
timer set; input that arrives later that day joins the kept input. The next day the timer's
run reads all of it, runs each tool call once and answers. The conformance suite
(tests/agent/test_conformance.py) checks the refusal in worker processes for every loop.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from pathlib import Path
from typing import Any

import pytest

import wakeful.agent.config as config_module
from agent_support import calls, write_config
from store import Outcome, Store
from store.spend import DAY, Usage
from wakeful.agent import Run, core
from wakeful.agent.effects import execute_runnable
from wakeful.agent.loading import import_callable

LOOPS = {
    "custom": "wakeful.examples.custom_loop:agent",
    "pydantic_ai": "wakeful.examples.pydantic_ai_loop:agent",
    "openai_agents": "wakeful.examples.openai_agents_loop:agent",
    "langgraph": "wakeful.examples.langgraph_loop:agent",
}
OWN_STATE = {"custom": None, "pydantic_ai": "pydantic_ai", "openai_agents": "openai_agents",
             "langgraph": "langgraph"}
NOTICE = "Out of budget for today: I will answer after midnight UTC."
CEILING = 1000


class Day:
    """The runtime's steps around one agent, by hand, at a given time."""

    def __init__(self, store: Store, agent: Any, cfg: Any) -> None:
        self.store, self.agent, self.cfg, self.n = store, agent, cfg, 0

    def say(self, text: str, now: int) -> None:
        self.n += 1
        self.store.ingest("ada", "chat", f"m{self.n}", {"text": text}, now=now)

    def wake(self, now: int | None) -> Outcome | None:
        """One run: the Outcome its finish committed; None when nothing was claimable."""
        store = self.store
        gen = store.acquire("ada", "w", now=now)
        assert gen is not None
        batch = store.claim("ada", "w", gen, now=now)
        if not batch:
            assert store.release("ada", "w", gen, now=now)
            return None
        run = Run("ada", batch, gen, store.runs.memory("ada"), lambda: True,
                  _check_budget=lambda budget: store.spend.check("ada", "w", gen, budget, now=now),
                  _count_spend=lambda budget, usage: store.spend.count("ada", budget, usage, now=now))
        outcome = self.agent(run)
        if inspect.isawaitable(outcome):
            outcome = asyncio.run(outcome)
        assert store.finish("ada", "w", gen, [e.id for e in batch], outcome=outcome, now=now)
        assert store.release("ada", "w", gen, now=now)
        return outcome

    def settle(self, now: int | None = None) -> None:
        """Runs (each effect executed after its commit) until nothing is claimable."""
        for _ in range(10):
            if self.wake(now) is None:
                return
            execute_runnable(self.store, self.cfg, "ada")
        raise AssertionError("the inbox never settled")


@pytest.mark.parametrize("loop", list(LOOPS))
def test_a_spent_day_stops_every_loop_keeps_its_input_and_answers_it_the_next_day(
        loop: str, store: Store, tool_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path / "agent.toml")
    with path.open("a") as f:
        f.write(f'\n[budget]\ninbox_tokens_per_day = {CEILING}\nnotice = "{NOTICE}"\n')
    monkeypatch.setenv(config_module.ENV, str(path))
    monkeypatch.setattr(config_module, "_current", None)
    cfg = config_module.current()
    assert cfg is not None
    day = Day(store, import_callable(LOOPS[loop]), cfg)
    today = (int(time.time()) // DAY - 1) * DAY  # yesterday, so the next day is now (the executor's clock)
    t = today + 60
    store.spend.count("ada", cfg.budget, Usage(cfg.model, CEILING, 0), now=t)  # the day is spent
    before = dict(store.runs.memory("ada"))

    day.say('call refund {"order": 8}\ncall lookup {"order": 7}', now=t)
    first = day.wake(now=t)
    assert first is not None and (first.messages, first.effects) == ([], [])
    assert [(x.timer_id, x.due) for x in first.timers] == [(core.BUDGET_TIMER, today + DAY)]
    assert calls(tool_log) == []  # the model was not asked, so nothing it would call ran
    assert [r.body for r in store.outbox("ada")] == [NOTICE]
    assert all(e.status == "done" for e in store.events("ada"))  # not failed, not retried
    memory = store.runs.memory("ada")
    if OWN_STATE[loop]:
        assert memory.get(OWN_STATE[loop]) == before.get(OWN_STATE[loop])  # the loop's own state untouched
    assert len(memory["toolkit"]["carried"]["events"]) == 1

    day.say('call lookup {"order": 9}', now=t + 600)  # later that day: joins the kept input
    later = day.wake(now=t + 600)
    assert later is not None and later.messages == [] and calls(tool_log) == []
    assert [r.body for r in store.outbox("ada")] == [NOTICE]  # told once a day
    assert len(store.runs.memory("ada")["toolkit"]["carried"]["events"]) == 2

    # The next UTC day: the timer wakes the inbox; everything kept is read, each call once.
    assert [f.inbox for f in store.run_scheduler()] == ["ada"]
    day.settle()
    ran = sorted((c["tool"], c["input"]["order"]) for c in calls(tool_log))
    assert ran == [("lookup", 7), ("lookup", 9), ("refund", 8)]
    assert len(store.outbox("ada")) > 1  # answered after the notice
    assert "carried" not in store.runs.memory("ada")["toolkit"]
    assert not [x for x in store.timers("ada") if not x.done]
