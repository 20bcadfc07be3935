"""Wakes the model sets, with real worker, control and beat processes on PostgreSQL and Redis
and the claude agent talking to the scripted Messages API over loopback HTTP with the real
SDK: a ``schedule_wake`` after 3 s wakes the inbox exactly once with three beats running; a
worker SIGSTOPped past its lease while its model call proposes a wake never writes it; a
cron wake in a time zone recurs through beat until ``cancel_wake``. The shortest delay is
lowered for the tests through the config (``[wakes] min_delay``), as a user would."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from wakeful.agent.scripted import ScriptedModel
from agent_support import agent_env
from test_wakes import call, wakes_config


def _start(make_cluster: Any, write_config: Any, model: ScriptedModel, tool_log: Path, **wakes: Any) -> Any:
    config = wakes_config(write_config, min_delay=1, **wakes)
    return make_cluster(env=agent_env(config, model.base_url, tool_log))


def _said(cluster: Any, inbox: str) -> list[str]:
    return [row.body for row in cluster.store.outbox(inbox)]


def _wake_events(cluster: Any, inbox: str) -> list[Any]:
    return [e for e in cluster.store.events(inbox) if e.source == "timer" and e.source_id.startswith("wake:")]


def _scans(beats: list[Any]) -> list[int]:
    return [b.text().count("wakeful.scan_timers") for b in beats]


def _after_more_scans(cluster: Any, beats: list[Any], more: int = 3) -> None:
    """Wait until every beat has ticked the scan ``more`` times again: what fires twice would
    have by then."""
    start = _scans(beats)
    cluster.wait(lambda: all(now >= then + more for now, then in zip(_scans(beats), start)),
                 f"{more} more scans from each beat")


def test_a_wake_after_3s_fires_once_with_three_beats(make_cluster: Any, write_config: Any,
                                                     model: ScriptedModel, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, model, tool_log, max_pending=1)
    extra = [cluster.procs.beat("beat2"), cluster.procs.beat("beat3")]
    cluster.procs.wait_ready(*extra)
    beats = [p for p in cluster.procs.procs if p.name.startswith("beat")]
    assert len(beats) == 3
    cluster.ingest("w", "chat", "1", {"text": call("schedule_wake", after_seconds=3, note="check the build")})
    cluster.ingest("full", "chat", "1", {"text": call("schedule_wake", after_seconds=3600, note="one") + "\n"
                                         + call("schedule_wake", after_seconds=3600, note="two")})

    cluster.wait(lambda: [b for b in _said(cluster, "w") if "Noted: check the build" in b], "the wake's reply")
    [event] = _wake_events(cluster, "w")
    [timer] = cluster.store.timers("w")
    assert event.source_id.startswith(f"{timer.id}@") and timer.done and event.payload["note"] == "check the build"
    woken = [r for r in model.requests for b in r["messages"][-1]["content"]
             if b.get("type") == "text" and b["text"].endswith("Your note:]\ncheck the build")]
    assert len(woken) == 1  # the model heard the note once
    _after_more_scans(cluster, beats)
    assert len(_wake_events(cluster, "w")) == 1 and len(cluster.store.events("w")) == 2  # the chat and the wake
    assert len([b for b in _said(cluster, "w") if "Noted: check the build" in b]) == 1

    # The limit, as the model was told it (the scripted API keeps what the SDK sent).
    refused = [b for r in model.requests for m in r["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result" and b.get("is_error")]
    assert len(refused) == 1 and "already has 1 pending wakes" in refused[0]["content"]
    assert "max_pending of [wakes]" in refused[0]["content"]
    assert [t.payload["note"] for t in cluster.store.timers("full")] == ["one"]


def test_a_stalled_workers_wake_never_fires(make_cluster: Any, write_config: Any,
                                            model: ScriptedModel, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, model, tool_log)
    [first] = cluster.run_workers
    hold = model.hold_next()
    cluster.ingest("stall", "chat", "1", {"text": call("schedule_wake", after_seconds=2, note="wake up")})
    cluster.wait(lambda: len(model.requests) == 1, "the first worker's model call")
    cluster.procs.kill(first, signal.SIGSTOP)  # paused inside the model call, past its lease
    second = cluster.procs.worker("runs-b", ("wakeful.runs",))
    cluster.procs.wait_ready(second)
    # The second worker took over: its wake is committed, fires, and the model hears it.
    cluster.wait(lambda: [b for b in _said(cluster, "stall") if "Noted: wake up" in b], "the taken-over wake's reply")
    hold.set()  # the first worker's reply arrives: a schedule_wake of its own
    cluster.procs.kill(first, signal.SIGCONT)
    cluster.wait(lambda: "'end': 'fenced'" in first.text(), "the stalled worker's run to end fenced")
    uses = [b["id"] for r in model.replies for b in r["content"]
            if b.get("type") == "tool_use" and b["name"] == "schedule_wake"]
    assert len(uses) == 2  # the stalled worker's and the second worker's
    beats = [p for p in cluster.procs.procs if p.name.startswith("beat")]
    _after_more_scans(cluster, beats)
    fired = {e.source_id.partition("@")[0] for e in _wake_events(cluster, "stall")}
    stored = {t.id for t in cluster.store.timers("stall")}
    assert len(fired) == 1 and fired == stored  # one wake, the committed one
    [committed] = fired
    stalled = [f"wake:{u}" for u in uses if f"wake:{u}" != committed]
    assert len(stalled) == 1 and stalled[0] not in stored | fired


def test_a_cron_wake_in_a_time_zone_recurs_until_cancelled(make_cluster: Any, write_config: Any,
                                                           model: ScriptedModel, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, model, tool_log)
    # Every 2 seconds (croniter's sixth field), in a zone half an hour off UTC.
    cluster.ingest("cron", "chat", "1", {"text": call("schedule_wake", cron="* * * * * */2", tz="Asia/Kolkata",
                                                      note="tick")})
    cluster.wait(lambda: len(_wake_events(cluster, "cron")) >= 2, "two occurrences of the cron wake")
    [timer] = cluster.store.timers("cron")
    assert (timer.cron, timer.tz, timer.done) == ("* * * * * */2", "Asia/Kolkata", False)
    cluster.ingest("cron", "chat", "2", {"text": call("cancel_wake", id=timer.id)})
    cluster.wait(lambda: cluster.store.timers("cron") == [], "the wake cancelled by the finish")
    cluster.wait(lambda: [b for b in _said(cluster, "cron") if f"cancel_wake: cancelled {timer.id}" in b],
                 "the model told it is cancelled")
    count = len(_wake_events(cluster, "cron"))
    _after_more_scans(cluster, [p for p in cluster.procs.procs if p.name.startswith("beat")])
    assert len(_wake_events(cluster, "cron")) == count  # no occurrence after the cancel
    scheduled = [e.payload["scheduled_for"] for e in _wake_events(cluster, "cron")]
    assert len(scheduled) == len(set(scheduled)) and all(s % 2 == 0 for s in scheduled)


def test_an_asked_wake_is_written_by_the_executor_after_the_yes(make_cluster: Any, write_config: Any,
                                                                model: ScriptedModel, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, model, tool_log, policy="ask")
    cluster.ingest("ask", "chat", "1", {"text": call("schedule_wake", after_seconds=2, note="approved wake")})
    cluster.wait(lambda: cluster.store.effects.view("ask"), "the asked wake")
    [effect] = cluster.store.effects.view("ask")
    assert effect.status == "asked" and not [t for t in cluster.store.timers("ask") if t.id.startswith("wake:")]
    assert cluster.store.answer_approval("ask", effect.tool_use_id, "yes") == "yes"
    done = cluster.wait(lambda: [e for e in cluster.store.effects.view("ask") if e.status == "done"],
                        "the approved wake executed")[0]
    assert not done.result["is_error"] and done.result["content"].startswith(f"scheduled wake:{effect.tool_use_id}")
    cluster.wait(lambda: [b for b in _said(cluster, "ask") if "Noted: approved wake" in b],
                 "the wake's reply")
    told = [b for r in model.requests for m in r["messages"] if isinstance(m["content"], list) for b in m["content"]
            if b.get("type") == "tool_result" and b["tool_use_id"] == effect.tool_use_id]
    assert told and told[-1]["content"] == done.result["content"]  # the model heard it was written
    _after_more_scans(cluster, [p for p in cluster.procs.procs if p.name.startswith("beat")])
    [event] = _wake_events(cluster, "ask")
    assert event.source_id.startswith(f"wake:{effect.tool_use_id}@")
