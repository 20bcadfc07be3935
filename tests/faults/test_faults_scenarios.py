"""Issue 4's eleven fault scenarios, short versions, against real Redis, PostgreSQL, worker
and beat processes. Each scenario (``scenarios.py``, shared with ``python -m bench.soak``)
injects its faults, waits for the system to drain, and the checker counts what was lost,
duplicated, overlapping or out of bounds: every count must be 0.
"""

from __future__ import annotations

import random

import pytest

import dense_scenario
import scenarios
from checker import COUNTS

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]


def _assert_clean(result: scenarios.Result) -> None:
    print("counts", result.counts, "injected", result.injected, "measured", result.measured)
    assert set(COUNTS) <= set(result.counts)
    assert result.violations() == {}, (result.counts, result.injected, result.measured)


def test_1_sigkill_at_each_fault_point(make_stack, rng: random.Random) -> None:
    result = scenarios.kill_at_points(make_stack, rng)
    assert result.injected == {"sigkill": 5}
    _assert_clean(result)


def test_2_paused_worker_is_fenced(make_stack, rng: random.Random) -> None:
    result = scenarios.pause_past_lease(make_stack, rng)
    _assert_clean(result)
    for phase in ("finish", "heartbeat"):
        gens = result.measured[phase]
        assert gens["finishing_generation"] == gens["paused_generation"] + 1


def test_3_three_beats_and_beat_down_for_days(make_stack, rng: random.Random) -> None:
    result = scenarios.many_beats(make_stack, rng)
    _assert_clean(result)
    assert result.measured["skipped"] >= 71


def test_4_redis_flushed_and_restarted_mid_burst(make_stack, private_redis, rng: random.Random) -> None:
    result = scenarios.redis_flush_restart(make_stack, rng, redis=private_redis)
    assert result.injected == {"flush": 1, "restart": 1}
    _assert_clean(result)


def test_5_pg_connections_killed_under_load(make_stack, rng: random.Random) -> None:
    result = scenarios.pg_connections_killed(make_stack, rng)
    assert result.injected["backends_terminated"] > 0
    assert result.measured["same_pids"]
    _assert_clean(result)


def test_6_hot_inbox_one_lease_at_a_time(make_stack, rng: random.Random) -> None:
    result = scenarios.hot_inbox(make_stack, rng)
    _assert_clean(result)
    print("light inboxes time-to-done (s): p50", result.measured["light_done_p50_s"],
          "p99", result.measured["light_done_p99_s"])


def test_7_poison_dead_after_exactly_max_attempts(make_stack, rng: random.Random) -> None:
    _assert_clean(scenarios.poison(make_stack, rng))


def test_8_dispatcher_killed_between_send_and_mark(make_stack, rng: random.Random) -> None:
    result = scenarios.dispatcher_killed(make_stack, rng)
    _assert_clean(result)
    assert result.measured == {"at-least-once deliveries": 2, "at-most-once deliveries": 1}


def test_9_approvals_answered_at_the_deadline(make_stack, rng: random.Random) -> None:
    _assert_clean(scenarios.approvals_at_deadline(make_stack, rng))


def test_10_worker_clock_off_by_ten_minutes(make_stack, rng: random.Random) -> None:
    result = scenarios.skewed_clocks(make_stack, rng)
    _assert_clean(result)
    assert result.measured["held_generation"] == 1


def test_11_pickle_refused_and_bad_calls_recorded(make_stack, rng: random.Random) -> None:
    _assert_clean(scenarios.pickle_and_bad_calls(make_stack, rng))


def test_12_agent_tool_calls_each_once_or_never(make_stack, rng: random.Random) -> None:
    from agent_checks import AGENT_COUNTS

    result = scenarios.agent_tools(make_stack, rng)
    assert set(AGENT_COUNTS) <= set(result.counts)
    _assert_clean(result)
    assert result.measured["tool_executions"] >= result.measured["tool_uses"] > 0


def test_13_the_model_api_down_costs_no_attempt_and_loses_no_question(make_stack, rng: random.Random) -> None:
    result = scenarios.model_api_down(make_stack, rng)
    _assert_clean(result)
    assert result.measured["fewest_waits"] >= 3


def test_14_a_dense_worker_killed_and_a_poison_that_exits_it(make_stack, rng: random.Random) -> None:
    # The async agent's phases run in tests/runtime/test_runtime_dense_faults.py, at 500 and 200.
    result = scenarios.dense_worker_faults(make_stack, rng, agents=(dense_scenario.SYNC_AGENT,))
    _assert_clean(result)
    assert result.measured["dead"] == 1  # the poison event, alone
