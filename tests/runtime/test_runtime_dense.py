"""A dense run worker (issue 22): the Procfile's run worker, Celery's threads pool, carries
hundreds of runs whose agent waits, on a handful of database connections, and ends a run
that passes ``WAKEFUL_RUN_TIME_LIMIT`` though the pool has no time limits of its own.

Real worker, control and beat processes on PostgreSQL and Redis, the fault scenarios'
agent (tests/faults/fault_agents.py: ``sleep`` waits without a heartbeat, as a model call
does, and announces it) and claim log. How many runs are inside the agent at once is counted
from those announcements, never inferred from a time.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from databases import REDIS_HOST, REDIS_PORT
from sqlalchemy import create_engine, text

from wakeful.cli.processes import RUN_CONCURRENCY, RUN_POOL
from tasks.runtime import DENSE_GC_THRESHOLDS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from checker import read_jsonl  # noqa: E402
from harness import Stack  # noqa: E402

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]
INBOXES = 200
# Runs that must be waiting inside the agent at once before it answers: how many a dense
# worker holds, counted, rather than how many a loaded machine happened to start within a
# fixed wait (a 2-second sleep saw 60 under a parallel suite).
IN_AGENT = 100


def _stack(tmp_path: Path, database_url: str, redis_db: int, **overrides: str) -> Stack:
    s = Stack(tmp_path / "home", database_url, f"redis://{REDIS_HOST}:{REDIS_PORT}/{redis_db}",
              overrides={"WAKEFUL_SWEEP_INTERVAL": "0.5", **overrides})
    control, beat = s.control(), s.beat()
    try:
        s.ready(control, beat)
    except BaseException:
        s.close()  # else its beat ticks on into the Redis database the next test reserves
        raise
    return s


@pytest.fixture
def stack(pg_url: str, redis_db: int, tmp_path: Path) -> Iterator[Stack]:
    s = _stack(tmp_path, pg_url, redis_db)
    yield s
    s.close()


class Peaks:
    """While a test waits, the most runs inside the agent at once and the most database
    connections the run worker held (``pg_stat_activity``), sampled in a thread."""

    def __init__(self, s: Stack, database_url: str, worker_pid: int) -> None:
        self.s, self.pid, self.in_agent, self.connections = s, worker_pid, 0, 0
        self._engine = create_engine(database_url.replace("/" + database_url.rsplit("/", 1)[1], "/postgres"))
        self._db = database_url.rsplit("/", 1)[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "Peaks":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._engine.dispose()

    def _sample(self) -> None:
        with self._engine.connect() as conn:
            while not self._stop.wait(0.05):
                lines = read_jsonl(self.s.fault_log)
                entered = sum(1 for line in lines if line.get("point") == "in_agent")
                finished = sum(1 for line in lines if line.get("point") == "after_finish_commit")
                self.in_agent = max(self.in_agent, entered - finished)
                held = conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = :db "
                                         "AND pid <> pg_backend_pid() AND application_name = 'wakeful' "
                                         "AND client_port IS NOT NULL"), {"db": self._db}).scalar_one()
                self.connections = max(self.connections, held)


def _serve_waiting(s: Stack, database_url: str, n: int = INBOXES, agent: str = "fault_agents:agent") -> Peaks:
    worker = s.worker("runs-dense", pool=RUN_POOL, concurrency=RUN_CONCURRENCY,
                      faults="after_finish_commit:log", extra_env={"WAKEFUL_AGENT": agent})
    s.ready(worker)
    inboxes = [f"wait-{i}" for i in range(n)]
    answer = s.home / "answer"  # the model answers once IN_AGENT runs wait for it at once
    with Peaks(s, database_url, worker.pid) as peaks:
        s.feed([(inbox, "chat", "m-1", {"hold": str(answer), "say": f"{inbox} answered"}) for inbox in inboxes])
        s.wait(lambda: peaks.in_agent >= IN_AGENT, f"{IN_AGENT} runs waiting at once", timeout=180)
        answer.touch()
        s.wait(lambda: s.settled(inboxes), f"{n} waiting runs served", timeout=max(180, n / 5))
    for inbox in inboxes:
        [event] = s.store.events(inbox)
        assert (event.status, event.attempts) == ("done", 1), (inbox, event)
        assert [r.outcome for r in s.store.operator.run_log(inbox)] == ["done"]
    counts = s.counts(gap=False)
    assert {k: v for k, v in counts.items() if v} == {}, counts
    logs = s.logs(tail=10**6)
    assert "QueuePool limit" not in logs and "Traceback" not in logs
    return peaks


def test_200_inboxes_whose_agent_waits_are_served_by_one_dense_worker_on_few_connections(
        stack: Stack, pg_url: str) -> None:
    peaks = _serve_waiting(stack, pg_url)
    print("peak runs inside the agent", peaks.in_agent, "peak connections", peaks.connections)
    assert peaks.in_agent >= IN_AGENT  # many runs wait at once in one process ...
    assert peaks.connections <= 20  # ... on the pool's connections, not one per run


def test_a_burst_rung_onto_one_task_has_every_inbox_in_the_agent_at_once(
        pg_url: str, redis_db: int, tmp_path: Path) -> None:
    """150 rings coalesced onto one queued task (what the doorbell does with a burst: the
    first ring sends, the others only count), and agents that answer only once all 150 are
    waiting at once. The task that stands for the burst serves its own inbox's run for as
    long as the agent waits, so the rest are served only if it recruits before that run,
    and its recruits recruit in turn: a chain that broke there left every other inbox
    waiting for the run to end (here: for ever: no sweep rings them within the test)."""
    stack = _stack(tmp_path, pg_url, redis_db, WAKEFUL_SWEEP_INTERVAL="3600")
    try:
        _burst_in_the_agent_at_once(stack, redis_db, tmp_path)
    finally:
        stack.close()


def _burst_in_the_agent_at_once(stack: Stack, redis_db: int, tmp_path: Path) -> None:
    import redis

    from tasks.doorbell import QUEUED_MARKER

    burst = 150
    worker = stack.worker("runs-dense", pool=RUN_POOL, concurrency=RUN_CONCURRENCY,
                          faults="after_finish_commit:log")
    stack.ready(worker)
    answer = tmp_path / "answer"
    inboxes = [f"burst-{i}" for i in range(burst)]
    stack.feed([(inbox, "chat", "m-1", {"hold": str(answer), "say": "ok"}) for inbox in inboxes], ring=False)
    redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=redis_db).incrby(QUEUED_MARKER, burst)
    stack.ring(inboxes[0])

    def in_agent() -> int:
        return sum(1 for line in read_jsonl(stack.fault_log) if line.get("point") == "in_agent")

    stack.wait(lambda: in_agent() >= burst, f"all {burst} runs in the agent at once", timeout=120)
    answer.touch()
    stack.wait(lambda: stack.settled(inboxes), f"{burst} runs finished", timeout=120)
    for inbox in inboxes:
        [event] = stack.store.events(inbox)
        assert (event.status, event.attempts) == ("done", 1), (inbox, event)
    assert in_agent() == burst  # and none ran twice


@pytest.mark.parametrize("agent, inboxes", [("fault_agents:agent", INBOXES), ("fault_agents:async_agent", 1_000)],
                         ids=["sync-200", "async-1000"])
def test_through_pgbouncer_waiting_inboxes_are_served_once_on_at_most_10_server_connections(
        pg_url: str, redis_db: int, tmp_path: Path, agent: str, inboxes: int) -> None:
    """The sync agent's 200, and 1,000 of an async agent (its runs wait on the worker
    process's event loop): each event done at its first attempt, one done run each."""
    from pgbouncer import POOL_SIZE, running_pgbouncer, server_connections, through

    assert POOL_SIZE <= 10
    with running_pgbouncer() as port:
        # The processes reach the store through PgBouncer; the test reads it directly.
        s = _stack(tmp_path, pg_url, redis_db, WAKEFUL_DATABASE_URL=through(pg_url, port),
                   WAKEFUL_DATABASE_POOLER="transaction")
        try:
            peak = [0]
            stop = threading.Event()

            def sample() -> None:
                while not stop.wait(0.1):
                    peak[0] = max(peak[0], server_connections(port, pg_url.rsplit("/", 1)[1]))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                peaks = _serve_waiting(s, pg_url, inboxes, agent)
            finally:
                stop.set()
                sampler.join(10)
        finally:
            s.close()
    print("peak runs inside the agent", peaks.in_agent, "peak server connections", peak[0])
    assert peaks.in_agent >= IN_AGENT and 0 < peak[0] <= 10


def test_a_run_past_the_time_limit_in_the_dense_pool_ends_and_its_lease_is_released(
        pg_url: str, redis_db: int, tmp_path: Path) -> None:
    """The lease lasts far longer than the test waits (600 s): an inbox the stuck run held
    comes back only because the runtime released it at the time limit (3 s)."""
    s = _stack(tmp_path, pg_url, redis_db, WAKEFUL_RUN_TIME_LIMIT="3", WAKEFUL_LEASE_TTL="600")
    try:
        worker = s.worker("runs-dense", pool=RUN_POOL, concurrency=8)
        s.ready(worker)
        s.feed([("stuck", "chat", "m-1", {"sleep": 3600})])
        s.wait(lambda: any("WAKEFUL_RUN_TIME_LIMIT" in (r.error or "") for r in s.store.operator.run_log("stuck")),
               "the stuck run ended at the time limit", timeout=60)
        s.feed([("stuck", "chat", "m-2", {"say": "after the stuck one"}), ("other", "chat", "m-1", {"say": "hi"})])
        s.wait(lambda: s.settled(["other"]) and any(e.status == "done" for e in s.store.events("stuck")),
               "the inbox served again though its stuck run's lease had 10 minutes left", timeout=60)
        s.wait(lambda: [e.status for e in s.store.events("stuck")] == ["dead", "done"],
               "the stuck event dead at the cap, each try ended at the limit", timeout=120)
        [stuck, _] = s.store.events("stuck")
        assert stuck.attempts == 3
        assert worker.alive()  # its threads were not lost with the runs
    finally:
        s.close()


def test_a_dense_worker_freezes_what_it_loaded_out_of_the_collector_and_collects_less_often(
        stack: Stack) -> None:
    """A full collection stops every run in the process: the dense worker's collector skips
    what the worker loaded before it was ready and runs its youngest generation less often
    (tasks/runtime.py ``DENSE_GC_THRESHOLDS``); asked from inside a run in that worker."""
    worker = stack.worker("runs-dense", pool=RUN_POOL, concurrency=8)
    stack.ready(worker)
    stack.feed([("collector", "chat", "m-1", {"gc": True})])
    rows = stack.wait(lambda: stack.store.outbox("collector"), "the run's report of its collector", timeout=60)
    report = json.loads(rows[0].body)
    assert tuple(report["thresholds"]) == DENSE_GC_THRESHOLDS
    assert report["frozen"] > 10_000  # the app, Celery and the store, not a handful of objects
