"""The runtime holds the lease while the agent works, and a lost finish reply strands nothing.

Real worker, control and beat processes on PostgreSQL and Redis, with the short lease of
``FAST_ENV`` (2 s): a model call is minutes, the lease a few seconds, and neither the agent's
manners nor a lost reply may make an event run twice.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]
ON_POSTGRES = pytest.mark.parametrize("backend", [pytest.param("redis_pg", marks=[pytest.mark.postgres,
                                                                                  pytest.mark.redis])])


@ON_POSTGRES
def test_an_agent_busy_for_four_leases_without_a_heartbeat_is_called_once(make_cluster) -> None:
    c = make_cluster(run_workers=2)  # a second worker ready to take over a lapsed lease
    ttl = int(c.env["WAKEFUL_LEASE_TTL"])
    c.ingest("uma", "chat", "u-1", {"text": "a slow model call", "slow_first_attempt": 4 * ttl})
    c.wait(lambda: c.settled("uma", 1), "the slow run to finish", timeout=4 * ttl + 30)
    [event] = c.store.events("uma")
    assert (event.status, event.attempts) == ("done", 1)
    [run] = c.store.runs("uma")
    assert run.generation == 1 and run.outcome == "done"
    assert c.store.counters()["lease_takeovers"] == 0
    assert len(c.store.outbox("uma")) == 1


@ON_POSTGRES
def test_a_lost_finish_reply_strands_nothing(make_cluster) -> None:
    """The first finish_and_claim commits (u-1 done, u-2 claimed) and its reply is lost (a
    connection dropped after COMMIT): the worker's retry gets u-2 back and runs it at once,
    attempt 1, instead of resigning over it and leaving it running for a takeover."""
    c = make_cluster(env={"WAKEFUL_FAULTS": "finish_reply:lose_reply:1"})
    c.ingest("vic", "chat", "v-1", {"text": "first", "work": 1.0})
    c.wait(lambda: c.store.status("vic").holder, "the first run to start")
    c.ingest("vic", "chat", "v-2", {"text": "second"})
    c.wait(lambda: c.settled("vic", 2), "both events done")
    assert [(e.source_id, e.status, e.attempts) for e in c.store.events("vic")] == [
        ("v-1", "done", 1), ("v-2", "done", 1)]
    runs = c.store.runs("vic")
    assert [len(r.event_ids) for r in runs] == [1, 1] and {r.generation for r in runs} == {1}
    assert "retrying once" in c.run_workers[0].text()
    assert c.store.counters()["lease_takeovers"] == 0
