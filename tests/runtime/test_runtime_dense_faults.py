"""Runs that share a process share its fate, and nothing more (issue 22 item 3).

A dense run worker (Celery's threads pool, started as such here whatever the Procfile says)
on PostgreSQL and Redis, with the fault scenarios' async agent (tests/faults/fault_agents.py:
its runs wait on the worker process's event loop) and claim log. The phases are scenario
14's (tests/faults/dense_scenario.py), each on its own stack: a worker SIGKILLed with 100
runs inside the agent, and a poison event that ``os._exit``s beside 50 healthy inboxes in
flight (500 and 200 with ``WAKEFUL_TEST_DENSE_SCALE=500,200``). Each asserts the phase's own counts and
the fault checker's. The last test calls tasks/isolation.py directly: what crosses from a run
apart to the worker, and when a run goes apart at all.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from databases import REDIS_HOST, REDIS_PORT

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
import dense_scenario  # noqa: E402
from harness import Stack  # noqa: E402


def services(test):  # type: ignore[no-untyped-def]
    """Real worker processes on PostgreSQL and Redis (the last test needs neither)."""
    return pytest.mark.processes(pytest.mark.postgres(pytest.mark.redis(test)))


@pytest.fixture
def stack(pg_url: str, redis_db: int, tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path / "home", pg_url, f"redis://{REDIS_HOST}:{REDIS_PORT}/{redis_db}",
              overrides={"WAKEFUL_SWEEP_INTERVAL": "0.5"})
    control, beat = s.control(), s.beat()
    try:
        s.ready(control, beat)
        yield s
    finally:
        s.close()  # also when it never came up: else its beat ticks on into the next test's Redis database


def _assert_phase(s: Stack, phase: Callable[[Stack], dict[str, int]]) -> None:
    counts = phase(s)
    counts.update(s.counts(gap=False))
    print("counts", counts, "crashes", s.crashes)
    assert {k: v for k, v in counts.items() if v} == {}, s.logs()


# How many async runs are in flight when the worker is killed, and beside the poison. The
# suite's sizes keep it within its minutes (every lost run is retried in a process of its
# own); WAKEFUL_TEST_DENSE_SCALE=500,200 is issue 56's scale, run on demand (docs/faults.md).
IN_FLIGHT, BESIDE = (int(n) for n in os.environ.get("WAKEFUL_TEST_DENSE_SCALE", "100,50").split(","))


@services
def test_a_dense_worker_killed_with_async_runs_in_flight_loses_none(stack: Stack) -> None:
    """The sync agent's phase, at 50, is CI's fault scenario 14."""
    _assert_phase(stack, lambda s: dense_scenario.killed_in_flight(s, IN_FLIGHT, dense_scenario.ASYNC_AGENT))
    assert stack.store.dead() == []


@services
def test_a_poison_async_agent_that_exits_a_dense_worker_parks_only_itself_dead(stack: Stack) -> None:
    _assert_phase(stack, lambda s: dense_scenario.poison_beside(s, BESIDE, dense_scenario.ASYNC_AGENT))
    assert [e.source_id for e in stack.store.dead()] == ["poison"]


# --- what crosses the boundary (a real fork server and children; no services) -------------
def _run(payload: dict, attempts: int, heartbeat=lambda: True, grant=lambda routes, ttl: "grant-token"):  # type: ignore[no-untyped-def]
    from wakeful.agent import Run
    from store import Event

    return Run(inbox="apart", events=[Event(7, "apart", "chat", "m-1", payload, "running", attempts)],
               generation=3, memory={"seen": 1}, _heartbeat=heartbeat, _mint_grant=grant)


def test_a_retried_batch_in_a_shared_process_runs_apart_and_what_crosses_back(monkeypatch) -> None:
    import os
    import time

    from celery.exceptions import SoftTimeLimitExceeded

    from wakeful.agent import LeaseLost, TryLater
    from runtime_agents import apart_probe
    from tasks import isolation, runtime

    monkeypatch.setitem(runtime._worker, "pool", "prefork")
    assert isolation.call_agent(apart_probe, _run({}, 2)).messages[0] == str(os.getpid())
    monkeypatch.setitem(runtime._worker, "pool", "threads")
    assert isolation.call_agent(apart_probe, _run({}, 1)).messages[0] == str(os.getpid())
    outcome = isolation.call_agent(apart_probe, _run({}, 2))
    assert outcome.messages[0] != str(os.getpid()) and outcome.memory == {"seen": 2}
    assert isolation.call_agent(apart_probe, _run({"grant": True}, 2)).messages[0] == "grant-token"
    with pytest.raises(TryLater) as later:
        isolation.call_agent(apart_probe, _run({"try_later": True}, 2))
    assert later.value.after == 3 and "in the run's own process" in later.value.__notes__[0]
    with pytest.raises(LeaseLost):
        isolation.call_agent(apart_probe, _run({"heartbeat": True}, 2, heartbeat=lambda: False))
    with pytest.raises(RuntimeError, match=r"the run's process died \(exit code 13\)"):
        isolation.call_agent(apart_probe, _run({"exit": True}, 2))
    with pytest.raises(SoftTimeLimitExceeded):
        isolation.call_agent(apart_probe, _run({"hang": 60}, 2), deadline=time.monotonic() + 1)
