"""Coalesced doorbells (tasks/doorbell.py): on Redis a ring sends a message only when no run
task is queued unstarted, and that task, once it starts, drains what the skipped rings stood
for straight from the database, ringing as it takes each inbox so free workers join in (real
worker, control and beat processes on PostgreSQL and Redis)."""

from __future__ import annotations

import signal
import time

import pytest
import redis

from wakeful.cli.processes import RUN_QUEUES
from tasks.celeryconfig import RUNS_QUEUE

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]
REDIS_PG = [pytest.param("redis_pg", marks=[pytest.mark.postgres, pytest.mark.redis])]
QUIET = {"WAKEFUL_SWEEP_INTERVAL": "3600"}  # only the doorbells, never the sweep, ring here


def _queued(c) -> int:  # type: ignore[no-untyped-def]
    return redis.Redis.from_url(c.broker_url).llen(RUNS_QUEUE)


@pytest.mark.parametrize("backend", REDIS_PG)
def test_a_burst_of_rings_queues_one_task_which_drains_them_all(make_cluster) -> None:
    c = make_cluster(run_workers=0, beat=False, env={**QUIET, "WAKEFUL_DOORBELL_COALESCE_SECONDS": "120"})
    for n in range(40):
        c.ingest(f"burst{n}", "chat", f"m-{n}", {"text": "hi", "silent": True})
    c.wait(lambda: all(len(c.store.events(f"burst{n}")) == 1 for n in range(40)), "40 events stored")
    assert _queued(c) == 1  # forty rings, one message: the others were skipped
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
    c.ingest("b", "chat", "m-1", {"text": "hi", "silent": True})
    c.wait(lambda: _queued(c) >= 1 and len(c.store.events("b")) == 1, "two events stored")
    assert _queued(c) == 1
    time.sleep(1.5)
    c.ingest("c", "chat", "m-1", {"text": "hi", "silent": True})
    c.wait(lambda: _queued(c) == 2, "a second message once the marker expired")


@pytest.mark.parametrize("backend", REDIS_PG)
def test_free_workers_join_a_drain_and_a_new_ring_is_served_after_it(make_cluster) -> None:
    c = make_cluster(run_workers=0, beat=False, env={**QUIET, "WAKEFUL_DOORBELL_COALESCE_SECONDS": "120",
                                                      "WAKEFUL_AGENT": "tests.runtime.runtime_agents:slow"})
    for n in range(12):
        c.ingest(f"slow{n}", "chat", f"m-{n}", {"text": "hi"})
    c.wait(lambda: all(len(c.store.events(f"slow{n}")) == 1 for n in range(12)), "12 events stored")
    assert _queued(c) == 1
    workers = [c.procs.worker(f"runs{i}", RUN_QUEUES) for i in range(3)]
    c.procs.wait_ready(*workers)
    c.wait(lambda: all(c.settled(f"slow{n}", 1) for n in range(12)), "every inbox done", timeout=60)
    runs = [r for n in range(12) for r in c.store.operator.run_log(f"slow{n}")]
    by_process = {r.holder.rsplit(":", 1)[0] for r in runs}
    assert len(by_process) == 3  # every worker took part, though one message was queued
    # Once the drain is over nothing is queued, and a ring for an idle system is sent at once.
    c.wait(lambda: _queued(c) == 0, "the queue empty after the drain")
    c.ingest("late", "chat", "m-1", {"text": "hi"})
    c.wait(lambda: c.settled("late", 1), "a ring after the drain served", timeout=30)


@pytest.mark.parametrize("backend", REDIS_PG)
def test_the_replies_of_a_burst_ring_one_dispatch_task_which_sends_them_all(make_cluster) -> None:
    """Every run that writes a message rings a dispatch; while one dispatch task is queued
    unstarted the others only add their inbox to it (here: no outbox worker until all 20
    runs are done, so exactly one message waits), and that task sends every inbox's reply."""
    from tasks.celeryconfig import OUTBOX_QUEUE
    from wakeful.cli.processes import CONTROL_QUEUES

    c = make_cluster(run_workers=1, beat=False, env={**QUIET, "WAKEFUL_DOORBELL_COALESCE_SECONDS": "120",
                                                      "WAKEFUL_OUTBOX_GAP": "0"})
    [control] = [p for p in c.procs.procs if p.name == "control"]
    c.procs.kill(control, signal.SIGKILL)
    inboxes = [f"reply{n}" for n in range(20)]
    for inbox in inboxes:
        c.store.ingest(inbox, "chat", "m-1", {"text": "hi"})
        c.client.send_task("wakeful.run_inbox", args=[inbox], queue=RUNS_QUEUE, ignore_result=True)
    c.wait(lambda: all(c.settled(inbox, 1) for inbox in inboxes), "20 runs done", timeout=60)
    broker = redis.Redis.from_url(c.broker_url)
    assert broker.llen(OUTBOX_QUEUE) == 1  # twenty rings, one dispatch message
    assert c.sent("reply0") == []
    c.procs.wait_ready(c.procs.worker("control2", CONTROL_QUEUES, concurrency=2))
    c.wait(lambda: all(c.sent(inbox) for inbox in inboxes), "every reply sent by the one task", timeout=60)
    assert broker.llen(OUTBOX_QUEUE) == 0
