"""One broker message serves many wakes: a task rung by the sweep (``drain``), once its inbox is
idle, takes the next ready inbox straight from the database (real worker, control and beat on
PostgreSQL and Redis)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]
INBOXES = 150


@pytest.mark.parametrize("backend", [pytest.param("redis_pg", marks=[pytest.mark.postgres, pytest.mark.redis])])
def test_a_backlog_without_doorbells_drains_from_one_doorbell(make_cluster) -> None:
    """As after a broker flushed under load: the events are stored, their doorbells gone, and
    the sweep is an hour away. One of the sweep's doorbells (for one of them) is enough."""
    c = make_cluster(run_workers=1, env={"WAKEFUL_SWEEP_INTERVAL": "3600"})
    assert all(c.store.intake.ingest_many([(f"b{n}", "chat", f"m-{n}", {"text": f"hi {n}", "silent": True})
                                           for n in range(INBOXES)]))
    c.client.send_task("wakeful.run_inbox", args=["b0"], kwargs={"drain": True}, queue="wakeful.runs")
    c.wait(lambda: all(c.settled(f"b{n}", 1) for n in range(INBOXES)), "every inbox drained", timeout=90)
    runs = [r for n in range(INBOXES) for r in c.store.operator.run_log(f"b{n}")]
    assert len(runs) == INBOXES  # each once: by that task and the helpers it recruited
    assert all(e.attempts == 1 for n in range(INBOXES) for e in c.store.events(f"b{n}"))


@pytest.mark.parametrize("backend", [pytest.param("redis_pg", marks=[pytest.mark.postgres, pytest.mark.redis])])
def test_a_hot_inbox_does_not_hold_the_others_back(make_cluster) -> None:
    """The hot inbox is handed back after each run (WAKEFUL_MAX_RUNS_PER_TASK=1) and skipped by
    the task that handed it back; the others are taken from the backlog meanwhile."""
    c = make_cluster(run_workers=1, env={"WAKEFUL_SWEEP_INTERVAL": "3600", "WAKEFUL_MAX_RUNS_PER_TASK": "1",
                                         "WAKEFUL_BATCH_LIMIT": "1"})
    c.store.intake.ingest_many([("hot", "chat", f"h-{n}", {"text": "busy", "silent": True}) for n in range(30)])
    c.store.intake.ingest_many([(f"o{n}", "chat", f"m-{n}", {"text": "hi", "silent": True}) for n in range(10)])
    c.client.send_task("wakeful.run_inbox", args=["hot"], kwargs={"drain": True}, queue="wakeful.runs")
    c.wait(lambda: all(c.settled(f"o{n}", 1) for n in range(10)), "the other inboxes done", timeout=60)
    hot_done = len([e for e in c.store.events("hot") if e.status == "done"])
    assert hot_done < 30  # the others did not wait for the hot inbox to drain
    c.wait(lambda: c.settled("hot", 30), "the hot inbox done too", timeout=60)
