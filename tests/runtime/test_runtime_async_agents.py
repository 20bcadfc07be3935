"""``async def agent(run)`` (issue 55): accepted wherever a sync agent is. It runs on the
worker process's one event loop (tasks/event_loop.py), through the Procfile's dense run
worker, with the lease, the deadline and the runs apart working as for a sync agent.

Real worker, control and beat processes on PostgreSQL and Redis; the agents are in
tests/runtime/runtime_agents.py."""

from __future__ import annotations

from pathlib import Path

import pytest

REDIS_PG = [pytest.param("redis_pg", marks=[pytest.mark.postgres, pytest.mark.redis])]
pytestmark = pytest.mark.processes
AGENT = {"WAKEFUL_AGENT": "runtime_agents:async_probe", "PYTHONPATH": str(Path(__file__).resolve().parent)}


@pytest.mark.parametrize("backend", REDIS_PG)
def test_async_runs_share_one_loop_per_worker_process_and_each_is_served_once(make_cluster) -> None:
    c = make_cluster(env=AGENT)
    inboxes = [f"a{i}" for i in range(30)]
    for inbox in inboxes:
        c.ingest(inbox, "chat", "m-1", {"wait": 1})
    c.wait(lambda: all(c.settled(i, 1) for i in inboxes), "every async run done", timeout=120)
    events = [e for i in inboxes for e in c.store.events(i)]
    assert {(e.status, e.attempts) for e in events} == {("done", 1)}
    said = {c.store.outbox(i)[0].body for i in inboxes}
    pids, threads, loops = zip(*(s.split(" ") for s in said))
    assert set(threads) == {"wakeful-async-agents"}  # not the run task's thread
    assert len(set(loops)) == len(set(pids))  # one loop per process, not one per run


@pytest.mark.parametrize("backend", REDIS_PG)
def test_a_blocking_call_in_an_async_agent_is_reported_in_the_log(make_cluster) -> None:
    c = make_cluster(env=AGENT)
    c.ingest("blocker", "chat", "m-1", {"block": 1.5})
    c.wait(lambda: c.settled("blocker", 1), "the blocking run done", timeout=60)
    c.wait(lambda: "the event loop of async agents was held for" in c.logs(20_000),
           "the watchdog's warning in the run worker's log", timeout=30)


@pytest.mark.parametrize("backend", REDIS_PG)
def test_an_async_run_past_the_time_limit_is_cancelled_and_its_inbox_served_again(
        make_cluster, tmp_path: Path) -> None:
    notes = tmp_path / "cancelled.log"
    c = make_cluster(env={**AGENT, "WAKEFUL_RUN_TIME_LIMIT": "3",
                          "WAKEFUL_LEASE_TTL": "600", "WAKEFUL_TEST_TOOL_LOG": str(notes)})
    c.ingest("stuck", "chat", "m-1", {"hang": True})
    c.wait(lambda: any("WAKEFUL_RUN_TIME_LIMIT" in (r.error or "") for r in c.store.operator.run_log("stuck")),
           "the stuck run ended at the time limit", timeout=60)
    c.wait(lambda: notes.exists() and "cancelled stuck" in notes.read_text(), "the coroutine cancelled", timeout=30)
    c.ingest("stuck", "chat", "m-2", {"wait": 0.1})
    c.wait(lambda: any(e.source_id == "m-2" and e.status == "done" for e in c.store.events("stuck")),
           "the inbox served again though its stuck run's lease had 10 minutes left", timeout=60)


def test_a_retried_async_batch_in_a_shared_process_runs_apart_on_a_loop_of_its_own(monkeypatch) -> None:
    import os

    from runtime_agents import async_probe
    from store import Event
    from tasks import isolation, runtime
    from wakeful.agent import Run, TryLater

    def run(payload: dict, attempts: int) -> Run:
        return Run(inbox="apart", events=[Event(7, "apart", "chat", "m-1", payload, "running", attempts)],
                   generation=3, memory={})

    monkeypatch.setitem(runtime._worker, "pool", "threads")
    here = isolation.call_agent(async_probe, run({}, 1)).messages[0].split(" ")
    apart = isolation.call_agent(async_probe, run({}, 2)).messages[0].split(" ")
    assert here[0] == str(os.getpid()) and here[1] == "wakeful-async-agents"
    assert apart[0] != str(os.getpid())  # a process of its own, the coroutine run to its end there
    with pytest.raises(TryLater):
        isolation.call_agent(async_probe, run({"try_later": True}, 2))
    with pytest.raises(RuntimeError, match="the run's process died"):
        isolation.call_agent(async_probe, run({"exit": True}, 2))
