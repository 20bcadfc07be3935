"""Runs that share a process share its fate, and nothing more (issue 22 item 3).

A dense run worker (Celery's threads pool, started as such here whatever the Procfile says)
on PostgreSQL and Redis, with the fault scenarios' agent (tests/faults/fault_agents.py) and
claim log. The phases are scenario 14's (tests/faults/dense_scenario.py), each on its own
stack: a worker SIGKILLed with 50 runs inside the agent, and a poison event that
``os._exit``s beside 50 healthy inboxes in flight. Each asserts the phase's own counts and
the fault checker's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from databases import REDIS_HOST, REDIS_PORT

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
import dense_scenario  # noqa: E402
from harness import Stack  # noqa: E402

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def stack(pg_url: str, redis_db: int, tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path / "home", pg_url, f"redis://{REDIS_HOST}:{REDIS_PORT}/{redis_db}",
              overrides={"WAKEFUL_SWEEP_INTERVAL": "0.5"})
    control, beat = s.control(), s.beat()
    s.ready(control, beat)
    yield s
    s.close()


def _assert_phase(s: Stack, phase: Callable[[Stack], dict[str, int]]) -> None:
    counts = phase(s)
    counts.update(s.counts(gap=False))
    print("counts", counts, "crashes", s.crashes)
    assert {k: v for k, v in counts.items() if v} == {}, s.logs()


def test_a_dense_worker_killed_with_50_runs_in_flight_loses_none(stack: Stack) -> None:
    _assert_phase(stack, dense_scenario.killed_in_flight)
    assert stack.store.dead() == []


def test_a_poison_that_exits_a_dense_worker_parks_only_itself_dead(stack: Stack) -> None:
    _assert_phase(stack, dense_scenario.poison_beside)
    assert [e.source_id for e in stack.store.dead()] == ["poison"]
