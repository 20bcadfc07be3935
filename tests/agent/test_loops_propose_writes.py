"""Every loop's write is a proposal the fenced finish commits, never a call the loop makes
(issue 55's last two rows of the conformance suite, in process on a real store, both engines).

The runtime's side is the same for every loop and is tested with real processes elsewhere: a
finish is refused once another worker holds the inbox (tests/faults scenario 2, the paused
worker), and a committed effect runs once however often it is rung, the worker SIGKILLed
after its finish included (scenario 12, every fault point). What each loop must do for those
to hold is what this file checks, for the custom kit loop, Pydantic AI, the OpenAI Agents SDK
and LangGraph, each on its framework's own test model:

- its run calls no write itself: the write comes back in ``Outcome.effects``;
- a run fenced before its finish leaves nothing: the finish is refused, no effect is stored,
  nothing runs, and the loop's own state in the inbox's memory is not written;
- the run that took over proposes the write again; committed, it runs exactly once though
  the executor is rung twice (the dead worker's ring and the sweep's).
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
from wakeful.agent import Run
from wakeful.agent.effects import execute_runnable
from wakeful.agent.loading import import_callable

LOOPS = {
    "custom": "wakeful.examples.custom_loop:agent",
    "pydantic_ai": "wakeful.examples.pydantic_ai_loop:agent",
    "openai_agents": "wakeful.examples.openai_agents_loop:agent",
    "langgraph": "wakeful.examples.langgraph_loop:agent",
}


def _run(store: Store, agent: Any, holder: str, now: int) -> tuple[int, list[int], Outcome]:
    gen = store.acquire("ada", holder, now=now)
    assert gen is not None
    batch = store.claim("ada", holder, gen, now=now)
    assert batch, "nothing claimed"
    run = Run("ada", batch, gen, store.runs.memory("ada"), lambda: True)
    outcome = agent(run)
    if inspect.isawaitable(outcome):
        outcome = asyncio.run(outcome)
    return gen, [e.id for e in batch], outcome


@pytest.mark.parametrize("loop", list(LOOPS))
def test_a_loops_write_is_proposed_never_run_by_a_fenced_run_and_run_once_after_the_finish(
        loop: str, store: Store, tool_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config_module.ENV, str(write_config(tmp_path / "agent.toml")))
    monkeypatch.setattr(config_module, "_current", None)
    cfg = config_module.current()
    assert cfg is not None
    agent = import_callable(LOOPS[loop])
    t = int(time.time())
    store.ingest("ada", "chat", "m1", {"text": 'call refund {"order": 8}'}, now=t)
    memory_before = store.runs.memory("ada")

    # The first run proposes the write and calls nothing ...
    gen, ids, outcome = _run(store, agent, "paused", now=t)
    assert [e.tool for e in outcome.effects] == ["refund"] and calls(tool_log) == []
    # ... but its worker stalls past the lease and another takes the inbox over.
    later = t + store.settings.lease_ttl + 1
    took_over, ids_again, again = _run(store, agent, "other", now=later)
    assert took_over > gen and ids_again == ids
    # The stalled run's finish is refused: nothing of it is stored, nothing runs.
    assert not store.finish("ada", "paused", gen, ids, outcome=outcome, now=later)
    assert store.effects.view("ada") == [] and store.runs.memory("ada") == memory_before
    assert execute_runnable(store, cfg, "ada") == [] and calls(tool_log) == []

    # The run that took over commits its own proposal; rung twice, the write runs once.
    assert [e.tool for e in again.effects] == ["refund"] and calls(tool_log) == []
    assert store.finish("ada", "other", took_over, ids_again, outcome=again, now=later)
    execute_runnable(store, cfg, "ada")
    execute_runnable(store, cfg, "ada")
    assert [(c["tool"], c["input"]) for c in calls(tool_log)] == [("refund", {"order": 8})]
    assert [e.status for e in store.effects.view("ada")] == ["done"]
