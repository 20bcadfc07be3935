"""The conformance suite (issue 55): every agent loop wakeful supports keeps the same
guarantees, because every loop's tool calls and words go through one core
(wakeful/agent/core.py, policy.py, kit.py). A new loop is supported when it passes this file.

One cluster per loop (real worker, control and beat processes on PostgreSQL and Redis), one
inbox per guarantee, the same words sent to each loop: every loop's stand-in model obeys a
``call NAME {json}`` line as a model a prompt has steered would (the claude loop's is the
scripted Messages API on loopback, driven through the real ``anthropic`` SDK; the others are
their framework's own test model). What each inbox shows:

- ``route``: an asked write goes to the approver ``[agent] approver`` names (``inbox:ops``),
  the requester's messages carry no link; the approver's yes runs it exactly once, and the
  loop reads the result back;
- ``deny``: a denied tool never runs;
- ``expire``: an ask left to expire never runs, and the loop is told;
- ``taint``: a stranger's text (``mail`` is not trusted) turns an allowed write into an ask;
- ``reply``: the answer to a person's message is a ``reply`` (sent inside the outbox gap)
  without the ``<untrusted>`` wrapper the loop's input carried;
- ``wake``: ``schedule_wake`` within ``[wakes]``'s limits wakes the inbox once;
- ``budget``: with the inbox's day spent, no model call (the tool a model would call never
  runs), the store's notice the only message, the resume timer set for the next UTC day
  (tests/agent/test_budget_kit.py and test_budgets_loop.py answer the kept input then).

The two rows about a worker's fate (a fenced run's write never runs; a committed write runs
once after its worker is SIGKILLed) are in tests/agent/test_loops_propose_writes.py for the
kit loops and in the fault scenarios for claude: what a loop must show there is that its
writes leave only as proposals, and that is checked in process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_support import ORDER_SCHEMA, agent_env, calls
from store.spend import DEFAULT_NOTICE, Usage
from wakeful.agent import core
from wakeful.agent.config import load
from wakeful.agent.scripted import ScriptedModel

LOOPS = {
    "claude": "claude",
    "custom": "wakeful.examples.custom_loop:agent",
    "pydantic_ai": "wakeful.examples.pydantic_ai_loop:agent",
    "openai_agents": "wakeful.examples.openai_agents_loop:agent",
    "langgraph": "wakeful.examples.langgraph_loop:agent",
}

CONFIG = f"""
[agent]
model = "claude-scripted"
system = "You run errands."
trusted_sources = ["chat"]
approver = "inbox:ops"

[tools.refund]
description = "Refund an order"
input_schema = {ORDER_SCHEMA}
call = "agent_tools:refund"
policy = "ask"
effect = "write"

[tools.refund_soon]
description = "Refund an order, if someone says yes within a second"
input_schema = {ORDER_SCHEMA}
call = "agent_tools:refund"
policy = "ask"
effect = "write"
approval_ttl = 1

[tools.wipe]
description = "Wipe an order"
input_schema = {ORDER_SCHEMA}
call = "agent_tools:refund"
policy = "deny"
effect = "write"

[tools.lookup]
description = "Look an order up"
input_schema = {ORDER_SCHEMA}
call = "agent_tools:lookup"
policy = "allow"
effect = "read"

[tools.note]
description = "Write a note on an order"
input_schema = {ORDER_SCHEMA}
call = "agent_tools:refund"
policy = "allow"
effect = "write"

[wakes]
policy = "allow"
min_delay = 1

[budget]
inbox_tokens_per_day = 1000000
"""


def _ran(tool_log: Path, inbox: str) -> list[tuple[str, Any]]:
    return [(c["tool"], c["input"]) for c in calls(tool_log) if c["inbox"] == inbox]


def _bodies(cluster: Any, inbox: str) -> list[str]:
    return [r.body for r in cluster.store.outbox(inbox)]


@pytest.mark.parametrize("loop", list(LOOPS))
def test_every_loop_keeps_wakefuls_guarantees(loop: str, make_cluster: Any, model: ScriptedModel,
                                               tool_log: Path, tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(CONFIG)
    env = agent_env(config, model.base_url, tool_log)
    env["WAKEFUL_AGENT"] = LOOPS[loop]
    c = make_cluster(env=env)
    said = {"route": 'call refund {"order": 1}', "deny": 'call wipe {"order": 2}',
            "expire": 'call refund_soon {"order": 3}', "reply": 'call lookup {"order": 5}',
            "wake": 'call schedule_wake {"after_seconds": 1, "note": "look again"}'}
    budget = load(config).budget
    c.store.spend.count("budget", budget, Usage("claude-scripted", budget.inbox_tokens or 0))  # its day spent
    said["budget"] = 'call lookup {"order": 6}'
    for inbox, text in said.items():
        c.ingest(inbox, "chat", "1", {"text": text})
    c.ingest("taint", "mail", "1", {"text": 'call note {"order": 4}'})

    # route: the approver named in [agent] gets the request, the requester no link.
    [asked] = c.wait(lambda: [e for e in c.store.effects.view("route") if e.status == "asked"], "route: asked")
    [approval] = c.store.approvals.view("route")
    assert approval.approver == "inbox:ops" and approval.request_id == asked.tool_use_id
    c.wait(lambda: [r for r in c.store.outbox("ops") if r.kind == "approval"], "ops: the approval request")
    assert not any("[[wakeful-approval-link" in b or "token=" in b for b in _bodies(c, "route")), _bodies(c, "route")
    assert c.store.answer_approval("route", asked.tool_use_id, "yes", by="inbox:ops") == "yes"
    c.wait(lambda: [b for b in _bodies(c, "route") if "refunded order 1" in b], "route: the result read back")
    c.ingest("route", "chat", "2", {"text": "thanks"})
    c.wait(lambda: c.settled("route", 4), "route: every event settled")  # its message, answer, result, thanks
    assert _ran(tool_log, "route") == [("refund", {"order": 1})]

    # deny: never runs, and the loop is told (the framework may refuse a tool it was never offered).
    c.wait(lambda: c.settled("deny", 1), "deny: settled")
    assert _ran(tool_log, "deny") == []

    # expire: never runs; the loop is told.
    c.wait(lambda: [b for b in _bodies(c, "expire") if "not approved in time" in b], "expire: the loop told")
    assert [e.status for e in c.store.effects.view("expire")] == ["expired"] and _ran(tool_log, "expire") == []

    # taint: a stranger's text makes the allowed write ask, naming why.
    [tainted] = c.wait(lambda: c.store.effects.view("taint"), "taint: the write proposed")
    assert tainted.status == "asked" and "mail" in (tainted.why or "") and _ran(tool_log, "taint") == []

    # reply: the answer to the person, sent as a reply, without the wrapper its input had.
    [row] = c.wait(lambda: c.store.outbox("reply"), "reply: the answer")
    assert row.kind == "reply" and "shipped" in row.body and "<untrusted" not in row.body, row.body
    assert _ran(tool_log, "reply") == [("lookup", {"order": 5})]

    # wake: the model's own timer fires once and wakes the inbox.
    woke = c.wait(lambda: [e for e in c.store.events("wake") if e.source == "timer"], "wake: the timer fired",
                  timeout=60)
    c.wait(lambda: c.settled("wake", 2), "wake: its run done")
    assert len(woke) == 1 and json.dumps(woke[0].payload).count("look again") == 1
    [timer] = c.store.timers("wake")
    assert timer.done

    # budget: the day spent, no model call; told once; woken when the next day's budget starts.
    c.wait(lambda: c.settled("budget", 1), "budget: settled")
    assert _bodies(c, "budget") == [DEFAULT_NOTICE] and _ran(tool_log, "budget") == []
    [resume] = c.store.timers("budget")
    assert resume.id == core.BUDGET_TIMER and not resume.done
