"""Coalesced doorbells (tasks/doorbell.py): on Redis a ring sends a message only when no run
task is queued unstarted, and that task, once it starts, drains what the skipped rings stood
for straight from the database, ringing as it takes each inbox so free workers join in (real
worker, control and beat processes on PostgreSQL and Redis).

What is counted is what the rings under test sent, once they have all been made: a queue is
read after the messages that ring were all acked (their calls returned), never at a moment
that merely tends to come after, and only the doorbell's own messages count. A beat another
test left running on this Redis database (a suite on a busy machine had one) puts its ticks
and its sweep's rings in the same queues: they are not rings of this test."""

from __future__ import annotations

import base64
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import redis

from wakeful.cli.processes import CONTROL_QUEUES, RUN_POOL, RUN_QUEUES
from tasks.celeryconfig import DEFAULT_QUEUE, OUTBOX_QUEUE, RUNS_QUEUE
from tasks.doorbell import QUEUED_MARKER, SWEPT_PREFIX

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]
REDIS_PG = [pytest.param("redis_pg", marks=[pytest.mark.postgres, pytest.mark.redis])]
QUIET = {"WAKEFUL_SWEEP_INTERVAL": "3600"}  # only the doorbells, never the sweep, ring here
FAULTS = Path(__file__).resolve().parents[1] / "faults"


def _broker(c) -> redis.Redis:  # type: ignore[no-untyped-def]
    return redis.Redis.from_url(c.broker_url)


def _waiting(c, queue: str, task: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:  # type: ignore[no-untyped-def]
    """The ``task`` messages waiting in ``queue``: each one's headers and keyword arguments."""
    found = []
    for raw in _broker(c).lrange(queue, 0, -1):
        message = json.loads(raw)
        headers = message.get("headers") or {}
        if headers.get("task") == task:
            _, kwargs, _ = json.loads(base64.b64decode(message["body"]))
            found.append((headers, kwargs or {}))
    return found


def _run_rings(c) -> int:  # type: ignore[no-untyped-def]
    """Run messages the doorbell's coalesced rings sent: a sweep's rings carry an expiry and
    are never coalesced, and none is made here but by a stray beat."""
    return sum(1 for headers, _ in _waiting(c, RUNS_QUEUE, "wakeful.run_inbox") if headers.get("expires") is None)


def _dispatch_rings(c) -> int:  # type: ignore[no-untyped-def]
    """Dispatch messages the runs' coalesced rings sent (a beat's tick carries no arguments)."""
    return sum(1 for _, kwargs in _waiting(c, OUTBOX_QUEUE, "wakeful.dispatch_outbox") if kwargs.get("rung"))


def _all_taken(c, queue: str) -> bool:  # type: ignore[no-untyped-def]
    """Every message of ``queue`` taken and acked: the calls that rang have all returned.
    (kombu's Redis transport keeps a taken message in ``unacked``, with the routing key it
    came by, our queue's name, until its ack.)"""
    broker = _broker(c)
    taken = [json.loads(entry) for entry in broker.hvals("unacked")]
    return broker.llen(queue) == 0 and not [t for t in taken if t[2] == queue]


@pytest.mark.parametrize("backend", REDIS_PG)
def test_a_burst_of_rings_queues_one_task_which_drains_them_all(make_cluster) -> None:
    c = make_cluster(run_workers=0, beat=False, env={**QUIET, "WAKEFUL_DOORBELL_COALESCE_SECONDS": "120"})
    for n in range(40):
        c.ingest(f"burst{n}", "chat", f"m-{n}", {"text": "hi", "silent": True})
    c.wait(lambda: all(len(c.store.events(f"burst{n}")) == 1 for n in range(40)), "40 events stored")
    c.wait(lambda: _all_taken(c, DEFAULT_QUEUE), "every ingest call returned (its ring made)")
    assert _run_rings(c) == 1  # forty rings, one message: the others were skipped
    worker = c.procs.worker("runs0", RUN_QUEUES)
    c.procs.wait_ready(worker)
    c.wait(lambda: all(c.settled(f"burst{n}", 1) for n in range(40)), "every inbox drained", timeout=60)
    holders = {r.holder for n in range(40) for r in c.store.operator.run_log(f"burst{n}")}
    assert 1 <= len(holders) <= 2  # the queued task, and at most the one its first take rang


@pytest.mark.parametrize("backend", REDIS_PG)
def test_a_marker_past_its_expiry_stands_for_nothing(make_cluster) -> None:
    """A queued task that never starts (stuck in a dead worker's prefetch, say) stops
    coalescing rings once the marker expires: the next ring sends a message of its own."""
    c = make_cluster(run_workers=0, beat=False, env={**QUIET, "WAKEFUL_DOORBELL_COALESCE_SECONDS": "1"})
    c.ingest("a", "chat", "m-1", {"text": "hi", "silent": True})
    c.wait(lambda: _all_taken(c, DEFAULT_QUEUE) and _run_rings(c) == 1, "a's ring queued")
    # The marker expires within the second it is set for (-2: gone already; -1 would be never).
    assert -1 != _broker(c).pttl(QUEUED_MARKER) <= 1000
    c.wait(lambda: not _broker(c).exists(QUEUED_MARKER), "the marker expired")
    assert _run_rings(c) == 1  # a's message still queued, unstarted
    c.ingest("b", "chat", "m-1", {"text": "hi", "silent": True})
    c.wait(lambda: _run_rings(c) == 2, "a second message once the marker expired")


@pytest.mark.parametrize("backend", REDIS_PG)
def test_a_sweep_rings_an_inbox_again_only_once_its_queued_ring_started(make_cluster) -> None:
    """Stale inboxes and no run worker yet: each sweep finds them all, but an inbox whose sweep
    ring is queued gets no second one until a worker started it. Rung anew every sweep
    instead, hundreds of stale inboxes and a short interval queued rings faster than a worker
    could drop the expired ones (tasks/doorbell.py ``SWEPT_PREFIX``)."""
    c = make_cluster(run_workers=0, beat=False, env={**QUIET, "WAKEFUL_SWEEP_INTERVAL": "30"})
    inboxes = [f"stale-{i}" for i in range(5)]
    for inbox in inboxes:
        c.ingest(inbox, "chat", "m-1", {"text": "hi", "silent": True})
    c.wait(lambda: _all_taken(c, DEFAULT_QUEUE) and all(c.store.events(i) for i in inboxes), "the events stored")

    def sweep_rings() -> list[str]:
        return sorted(args for args in (_args_of(raw) for raw in _broker(c).lrange(RUNS_QUEUE, 0, -1)) if args)

    for _ in range(3):
        assert c.send("wakeful.sweep", want_result=True) == {"inboxes_rung": 5}
        assert sweep_rings() == inboxes  # the queued rings stand for every later sweep's
    # One that expired unstarted holds the next ring back for ten of its lifetimes.
    assert all(30_000 < _broker(c).pttl(SWEPT_PREFIX + i) <= 300_000 for i in inboxes)
    runs = c.procs.worker("runs", RUN_QUEUES, concurrency=4, pool=RUN_POOL)
    c.procs.wait_ready(runs)
    c.wait(lambda: all(c.settled(i, 1) for i in inboxes), "the stale inboxes served")
    assert not any(_broker(c).exists(SWEPT_PREFIX + i) for i in inboxes)  # started: may be rung again


def _args_of(raw: bytes) -> str | None:
    """A sweep ring's inbox (a message with an expiry), else None."""
    message = json.loads(raw)
    headers = message.get("headers") or {}
    if headers.get("task") != "wakeful.run_inbox" or headers.get("expires") is None:
        return None
    args, _, _ = json.loads(base64.b64decode(message["body"]))
    return args[0]


@pytest.mark.parametrize("backend", REDIS_PG)
def test_free_workers_join_a_drain_and_a_new_ring_is_served_after_it(make_cluster, tmp_path) -> None:
    """Each inbox's run waits in the agent until the test opens the gate, so every worker is
    seen taking part while one message was queued, however late each one came up. The
    Procfile's pool, one slot each: a threads worker's task rings for help as it takes each
    inbox, its own first (a prefork worker's only once it has drained for ``RECRUIT_AFTER``:
    a time, which a held run never lets pass)."""
    in_agent = tmp_path / "in_agent.jsonl"
    gate = tmp_path / "gate"
    c = make_cluster(run_workers=0, beat=False, env={
        **QUIET, "WAKEFUL_DOORBELL_COALESCE_SECONDS": "120", "WAKEFUL_AGENT": "fault_agents:agent",
        "WAKEFUL_FAULTS_LOG": str(in_agent),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(FAULTS), os.environ.get("PYTHONPATH")]))})
    for n in range(12):
        c.ingest(f"slow{n}", "chat", f"m-{n}", {"hold": str(gate)})
    c.wait(lambda: all(len(c.store.events(f"slow{n}")) == 1 for n in range(12)), "12 events stored")
    c.wait(lambda: _all_taken(c, DEFAULT_QUEUE), "every ingest call returned (its ring made)")
    assert _run_rings(c) == 1
    workers = [c.procs.worker(f"runs{i}", RUN_QUEUES, concurrency=1, pool=RUN_POOL) for i in range(3)]
    c.procs.wait_ready(*workers)

    def holding() -> set[int]:  # the processes with a run waiting in the agent
        lines = in_agent.read_text().splitlines() if in_agent.exists() else []
        return {json.loads(line)["pid"] for line in lines}

    # One slot each: runs of three processes in the agent at once is every worker taking part.
    c.wait(lambda: len(holding()) >= 3, "a run of each worker waiting in the agent", timeout=120)
    gate.touch()
    c.wait(lambda: all(c.settled(f"slow{n}", 1) for n in range(12)), "every inbox done", timeout=60)
    runs = [r for n in range(12) for r in c.store.operator.run_log(f"slow{n}")]
    assert len({r.holder.rsplit(":", 1)[0] for r in runs}) == 3
    # Once the drain is over nothing is queued, and a ring for an idle system is sent at once.
    c.wait(lambda: _run_rings(c) == 0, "the queue empty after the drain")
    c.ingest("late", "chat", "m-1", {"text": "hi"})
    c.wait(lambda: c.settled("late", 1), "a ring after the drain served", timeout=30)


@pytest.mark.parametrize("backend", REDIS_PG)
def test_the_replies_of_a_burst_ring_one_dispatch_task_which_sends_them_all(make_cluster) -> None:
    """Every run that writes a message rings a dispatch; while one dispatch task is queued
    unstarted the others only add their inbox to it (here: no outbox worker until all 20
    runs are done, so exactly one message waits), and that task sends every inbox's reply."""
    c = make_cluster(run_workers=1, beat=False, env={**QUIET, "WAKEFUL_DOORBELL_COALESCE_SECONDS": "120",
                                                      "WAKEFUL_OUTBOX_GAP": "0"})
    [control] = [p for p in c.procs.procs if p.name == "control"]
    c.procs.kill(control, signal.SIGKILL)
    inboxes = [f"reply{n}" for n in range(20)]
    for inbox in inboxes:
        c.store.ingest(inbox, "chat", "m-1", {"text": "hi"})
        c.client.send_task("wakeful.run_inbox", args=[inbox], queue=RUNS_QUEUE, ignore_result=True)
    c.wait(lambda: all(c.settled(inbox, 1) for inbox in inboxes), "20 runs done", timeout=60)
    c.wait(lambda: _all_taken(c, RUNS_QUEUE), "every run task returned (its dispatch rung)")
    assert _dispatch_rings(c) == 1  # twenty rings, one dispatch message
    assert c.sent("reply0") == []
    c.procs.wait_ready(c.procs.worker("control2", CONTROL_QUEUES, concurrency=2))
    c.wait(lambda: all(c.sent(inbox) for inbox in inboxes), "every reply sent by the one task", timeout=60)
    assert _dispatch_rings(c) == 0
