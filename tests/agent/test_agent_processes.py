"""The claude agent hosted by real worker, control and beat processes on PostgreSQL and
Redis, talking to the scripted Messages API over loopback HTTP with the real SDK.

Every scenario of the issue that needs processes: allow -> result -> reply; ask -> yes ->
exactly one execution; ask -> no and ask left to expire -> never executed, the model told;
deny; a reply with a read and an ask; an API 500 retried (this file's first test, one
cluster for all); an executor SIGKILLed between the tool call and the record (at-least-once:
called again with the same key; at-most-once: never again); a worker SIGSTOPped during a
model call past its lease while another takes over (its proposed effect never runs); the
run workers restarted between an ask and its answer (the conversation resumes).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from wakeful.agent.scripted import ScriptedModel
from agent_support import ATTACK_TOOLS, BASE_TOOLS, agent_env, calls

pytestmark = []

TOOLS = {**BASE_TOOLS, **ATTACK_TOOLS,
         "refund_quick": {"call": "agent_tools:refund", "policy": "ask", "effect": "write",
                          "approval_ttl": 2},
         "die_least": {"call": "agent_tools:refund_then_die", "policy": "allow", "effect": "write"},
         "die_most": {"call": "agent_tools:refund_then_die", "policy": "allow", "effect": "write",
                      "delivery": "at_most_once"}}


def _start(make_cluster: Any, write_config: Any, model: ScriptedModel, tool_log: Path, **kw: Any) -> Any:
    config = write_config(TOOLS, effect_timeout=3, timeout=30)
    return make_cluster(env=agent_env(config, model.base_url, tool_log), **kw)


def _said(cluster: Any, inbox: str) -> list[str]:
    return [row.body for row in cluster.store.outbox(inbox)]


def _replied(cluster: Any, inbox: str, text: str) -> Any:
    return cluster.wait(lambda: [b for b in _said(cluster, inbox) if text in b], f"{inbox}: a reply with {text!r}")


def _asked(cluster: Any, inbox: str, count: int) -> list[Any]:
    cluster.wait(lambda: len(cluster.store.effects.view(inbox)) >= count, f"{inbox}: {count} effects")
    return sorted(cluster.store.effects.view(inbox), key=lambda e: e.input["order"])


def _answer(cluster: Any, inbox: str, request_id: str, answer: str) -> None:
    """A human's answer, stored as the web edge stores it; the sweep rings the inbox (the
    signed-link path is tests/agent/test_agent_browser.py)."""
    assert cluster.store.answer_approval(inbox, request_id, answer) == answer


def _executions(tool_log: Path, inbox: str) -> list[dict[str, Any]]:
    return [c for c in calls(tool_log) if c["inbox"] == inbox]


def test_allow_ask_deny_expiry_and_a_retried_500(make_cluster: Any, write_config: Any,
                                                  model: ScriptedModel, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, model, tool_log)
    model.fail_next(1, 500)  # the first model call fails once: the SDK retries it
    cluster.ingest("allow", "chat", "1", {"text": 'call refund {"order": 1}'})
    cluster.ingest("ask", "chat", "1", {"text": 'call refund_asked {"order": 2}\ncall refund_asked {"order": 3}'})
    cluster.ingest("deny", "chat", "1", {"text": 'call wipe {"order": 4}'})
    cluster.ingest("expire", "chat", "1", {"text": 'call refund_quick {"order": 5}'})
    cluster.ingest("mix", "chat", "1", {"text": 'call lookup {"order": 6}\ncall refund_asked {"order": 6}'})

    _replied(cluster, "allow", "refund: refunded order 1")
    assert [c["input"] for c in _executions(tool_log, "allow")] == [{"order": 1}]
    assert any(r.get("messages") for r in model.requests)  # 500 then success: both reached us
    summary = cluster.wait(lambda: [line for line in cluster.run_workers[0].text().splitlines()
                                    if "'inbox': 'allow'" in line and "'model_calls': 1" in line],
                           "the run summary (what Flower shows) with the model calls")[0]
    assert "'effects': 1" in summary and "'tokens': '" in summary and "'tools': " in summary
    _replied(cluster, "deny", "wipe failed: the tool 'wipe' is not available")

    yes, no = _asked(cluster, "ask", 2)
    _answer(cluster, "ask", yes.tool_use_id, "yes")
    _answer(cluster, "ask", no.tool_use_id, "no")
    reply = _replied(cluster, "ask", "refund_asked: refunded order 2")
    assert "refund_asked failed: the tool call was refused by a human" in reply[0] or \
        any("refused by a human" in b for b in _said(cluster, "ask"))
    assert [c["input"] for c in _executions(tool_log, "ask")] == [{"order": 2}]

    _replied(cluster, "expire", "not approved in time (expired); nothing ran")
    assert _executions(tool_log, "expire") == []
    assert cluster.store.effects.view("expire")[0].status == "expired"

    [asked] = [e for e in _asked(cluster, "mix", 1)]
    assert [c["tool"] for c in _executions(tool_log, "mix")] == ["lookup"]  # the read ran inline
    _answer(cluster, "mix", asked.tool_use_id, "yes")
    both = _replied(cluster, "mix", "refund_asked: refunded order 6")
    assert 'lookup: {"order": 6' in both[0]
    assert [c["tool"] for c in _executions(tool_log, "mix")] == ["lookup", "refund_asked"]
    # Each committed tool use ran at most once, whatever rang twice.
    ids = [c["id"] for c in calls(tool_log) if c["tool"] != "lookup"]
    assert len(ids) == len(set(ids))


def test_a_read_tools_answer_never_unlocks_a_write_in_the_workers(
        make_cluster: Any, write_config: Any, model: ScriptedModel, tool_log: Path) -> None:
    """Issue 23, item 1, as the attack ran: the owner asks on a trusted source, the allowed
    read's answer carries a stranger's instruction, the red-team model obeys it; the write is
    asked (the approval request names why) and never runs."""
    cluster = _start(make_cluster, write_config, model, tool_log)
    cluster.ingest("inject", "chat", "1", {"text": 'call lookup_order {"order": 13}'})
    [effect] = _asked(cluster, "inject", 1)
    assert (effect.tool, effect.status) == ("send_invoice", "asked")
    [request] = _replied(cluster, "inject", "Approval needed")
    assert "attacker@evil.example" in request
    assert "Why wakeful asks: the conversation holds the output of lookup_order, which is not trusted" in request
    assert [c["tool"] for c in _executions(tool_log, "inject")] == ["lookup_order"]


def test_a_killed_executor_retries_with_the_same_key_only_when_at_least_once(
        make_cluster: Any, write_config: Any, model: ScriptedModel, tool_log: Path) -> None:
    """The tool kills the process that executes it: the dense run worker (tool calls run
    there, many at once), with whatever else it carried. A supervisor starts it again, as in
    production; each restart is counted."""
    cluster = _start(make_cluster, write_config, model, tool_log)
    restarts: list[Any] = []

    def supervised(condition: Any) -> Any:
        def check() -> Any:
            if not any(p.alive() for p in cluster.run_workers + restarts):
                restarts.append(cluster.procs.worker(f"runs-restarted-{len(restarts)}", ("wakeful.runs",),
                                                     concurrency=20, pool="threads"))
            return condition()
        return check

    cluster.ingest("least", "chat", "1", {"text": 'call die_least {"order": 1}'})
    cluster.wait(supervised(lambda: [b for b in _said(cluster, "least") if "die_least: refunded order 1" in b]),
                 "least: the reply after the retried call", timeout=90)
    assert len(restarts) == 1  # the first try killed its process
    tries = _executions(tool_log, "least")
    assert len(tries) == 2 and len({(t["id"], t["key"]) for t in tries}) == 1
    # Attempts count takes, not calls: the retry is a later attempt, in another process.
    assert tries[0]["attempt"] < tries[1]["attempt"] and tries[0]["pid"] != tries[1]["pid"]
    # The at-most-once call after the other is settled: were they in flight together, the
    # other's kill could take this one's process between its take and its call, and an
    # at-most-once effect taken and never called is rightly "interrupted" with no call at all.
    cluster.ingest("most", "chat", "1", {"text": 'call die_most {"order": 2}'})
    cluster.wait(supervised(lambda: [b for b in _said(cluster, "most")
                                     if "die_most failed: the tool call was interrupted" in b]),
                 "most: told the call was interrupted", timeout=90)
    assert len(_executions(tool_log, "most")) == 1
    assert cluster.store.effects.view("most")[0].status == "interrupted"


def test_a_stalled_workers_proposed_effect_never_runs(make_cluster: Any, write_config: Any,
                                                       model: ScriptedModel, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, model, tool_log)
    [first] = cluster.run_workers
    hold = model.hold_next()
    cluster.ingest("stall", "chat", "1", {"text": 'call refund {"order": 7}'})
    cluster.wait(lambda: len(model.requests) == 1, "the first worker's model call")
    cluster.procs.kill(first, signal.SIGSTOP)  # paused inside the model call, past its lease
    second = cluster.procs.worker("runs-b", ("wakeful.runs",))
    cluster.procs.wait_ready(second)
    _replied(cluster, "stall", "refund: refunded order 7")  # the second worker took over
    hold.set()  # the first worker's reply arrives, with a tool use of its own
    cluster.procs.kill(first, signal.SIGCONT)
    cluster.wait(lambda: "'end': 'fenced'" in first.text(), "the stalled worker's run to end fenced")
    stalled_use = [b["id"] for b in model.replies[-1]["content"] if b["type"] == "tool_use"]
    assert stalled_use and model.replies[-1]["content"][-1]["name"] == "refund"  # it proposed one
    [effect] = cluster.store.effects.view("stall")  # only the second worker's was committed
    [call] = _executions(tool_log, "stall")
    assert call["id"] == effect.tool_use_id != stalled_use[0] and effect.generation >= 2


def test_the_conversation_resumes_after_a_restart_between_ask_and_answer(
        make_cluster: Any, write_config: Any, model: ScriptedModel, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, model, tool_log)
    cluster.ingest("resume", "chat", "1", {"text": 'call refund_asked {"order": 8}'})
    [asked] = _asked(cluster, "resume", 1)
    for proc in cluster.run_workers:
        cluster.procs.kill(proc, signal.SIGKILL)
    fresh = cluster.procs.worker("runs-new", ("wakeful.runs",))
    cluster.procs.wait_ready(fresh)
    _answer(cluster, "resume", asked.tool_use_id, "yes")
    _replied(cluster, "resume", "refund_asked: refunded order 8")
    assert len(_executions(tool_log, "resume")) == 1
    history = model.requests[-1]["messages"]
    assert history[0]["content"][0]["text"] == 'call refund_asked {"order": 8}'
