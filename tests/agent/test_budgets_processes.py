"""Budgets with real worker, control and beat processes on PostgreSQL and Redis, the claude
agent talking to the scripted Messages API (which counts the requests it got) with the real
SDK: a budget of N tokens reached by the scripted model's usage stops the next call, the
operator has an incident, the user is told once, the figure survives a restart of the run
workers; a worker stopped past its lease after its model call has that call counted.

(The next UTC day resuming is tests/agent/test_budgets_loop.py's: there time is an argument.
These run on the wall clock, and a test that straddles midnight UTC would see a new day.)"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from wakeful.agent.claude import TOTALS_KEY
from wakeful.agent.scripted import ScriptedModel
from agent_support import agent_env
from tasks.summary import incidents, render

NOTICE = "Daily budget reached: your message waits until tomorrow (UTC)."


def _start(make_cluster: Any, write_config: Any, model: ScriptedModel, tool_log: Path, budget: str) -> Any:
    config = write_config(timeout=30)
    config.write_text(config.read_text() + "\n[budget]\nagent_name = \"errands\"\n" + budget)
    return make_cluster(env=agent_env(config, model.base_url, tool_log))


def _tokens(replies: list[dict[str, Any]]) -> int:
    return sum(r["usage"]["input_tokens"] + r["usage"]["output_tokens"] for r in replies)


def _inbox_row(cluster: Any, inbox: str) -> Any:
    rows = [r for r in cluster.store.spend.today(inbox) if r.scope == "inbox"]
    return rows[0] if rows else None


def test_a_budget_of_n_tokens_stops_the_next_call_tells_once_and_survives_a_restart(
        make_cluster: Any, write_config: Any, model: ScriptedModel, tool_log: Path) -> None:
    # N = 1: the first call's usage reaches it; the call after the read would pass it.
    cluster = _start(make_cluster, write_config, model, tool_log,
                     f'inbox_tokens_per_day = 1\nnotice = "{NOTICE}"\n')
    cluster.ingest("capped", "chat", "1", {"text": 'call lookup {"order": 1}'})
    cluster.wait(lambda: cluster.settled("capped", 1) and _inbox_row(cluster, "capped") is not None
                 and _inbox_row(cluster, "capped").refused == 1, "the run to end at the budget")
    assert len(model.requests) == 1  # the tool use; its result was never sent to the model
    assert [e.status for e in cluster.store.events("capped")] == ["done"]  # not failed, not retried
    row = _inbox_row(cluster, "capped")
    assert (row.calls, row.tokens, row.token_ceiling) == (1, _tokens(model.replies), 1)
    # The user is told, through the channel, once.
    cluster.wait(lambda: [m for m in cluster.sent("capped") if NOTICE in m["body"]], "the notice sent")
    # The operator's incident: /metrics' figures and the daily summary.
    figures = cluster.store.operator.metrics()["budgets"]
    assert figures["reached_today"]["inbox"] == 1 and figures["refused_calls"]["inbox"] == 1
    assert figures["agents_today"]["errands"]["tokens"] == row.tokens
    since = row.first_refused - 1
    summary = render(incidents(cluster.store, since), since, row.first_refused + 1)
    assert summary is not None and "inbox capped" in summary and "1 call(s) not made" in summary

    # Every run worker killed and a fresh one started: the day's figure is in the database.
    for proc in cluster.run_workers:
        cluster.procs.kill(proc, signal.SIGKILL)
    fresh = cluster.procs.worker("runs-new", ("wakeful.runs",), concurrency=5, pool="threads")
    cluster.procs.wait_ready(fresh)
    cluster.ingest("capped", "chat", "2", {"text": "are you there?"})
    cluster.wait(lambda: cluster.settled("capped", 2) and _inbox_row(cluster, "capped").refused == 2,
                 "the fresh worker's run to end at the budget too")
    assert len(model.requests) == 1  # still no second call
    assert _inbox_row(cluster, "capped").calls == 1
    notices = [b.body for b in cluster.store.outbox("capped")]
    assert notices == [NOTICE]  # told once a day, not once a run
    # The held input (the read's result and the new message) waits in the conversation.
    history = cluster.store.runs.memory("capped")["claude"]["messages"]
    assert history[-1]["role"] == "user" and "are you there?" in str(history[-1])
    assert [t.id for t in cluster.store.timers("capped") if not t.done] == ["wakeful-budget-resumes"]


def test_a_fenced_runs_model_call_is_counted(make_cluster: Any, write_config: Any, model: ScriptedModel,
                                            tool_log: Path) -> None:
    """The worker is stopped inside its model call past its lease; another takes the inbox
    over and answers; the first wakes, gets its reply, and its finish is refused. Its call
    was paid for: the spend counts both calls, where the committed totals count one. (The
    second worker runs the retried event apart, in a process of its own: its check and count
    cross that process's pipe.)"""
    cluster = _start(make_cluster, write_config, model, tool_log, "agent_tokens_per_day = 1000000\n")
    [first] = cluster.run_workers
    hold = model.hold_next()
    cluster.ingest("stall", "chat", "1", {"text": "hello"})
    cluster.wait(lambda: len(model.requests) == 1, "the first worker's model call")
    cluster.procs.kill(first, signal.SIGSTOP)  # inside the call; its 2 s lease lapses
    try:
        second = cluster.procs.worker("runs-b", ("wakeful.runs",), concurrency=5, pool="threads")
        cluster.procs.wait_ready(second)
        cluster.wait(lambda: [r for r in cluster.store.outbox("stall") if "Noted: hello" in r.body],
                     "the second worker's answer")
        hold.set()  # the first worker's reply is on its way
    finally:
        cluster.procs.kill(first, signal.SIGCONT)
    cluster.wait(lambda: "'end': 'fenced'" in first.text(), "the stopped worker's run to end fenced")
    assert len(model.replies) == 2
    cluster.wait(lambda: _inbox_row(cluster, "stall").calls == 2, "both calls counted")
    row = _inbox_row(cluster, "stall")
    assert row.tokens == _tokens(model.replies)
    [agent] = [r for r in cluster.store.spend.today("stall") if r.scope == "agent"]
    assert (agent.name, agent.calls, agent.tokens) == ("errands", 2, row.tokens)
    assert cluster.store.runs.memory("stall")[TOTALS_KEY]["model_calls"] == 1  # the committed run's only
    assert [r.body for r in cluster.store.outbox("stall")] == ["Noted: hello"]  # one answer
