"""The runtime holds the lease while the agent works, and a lost finish reply strands nothing.

Real worker, control and beat processes on PostgreSQL and Redis, with the short lease of
``FAST_ENV`` (2 s): a model call is minutes, the lease a few seconds, and neither the agent's
manners nor a lost reply may make an event run twice.
"""

from __future__ import annotations

import sys

import pytest

from wakeful.cli.processes import RUN_QUEUES

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
    [run] = c.store.operator.run_log("uma")
    assert run.generation == 1 and run.outcome == "done"
    assert c.store.operator.counters()["lease_takeovers"] == 0
    assert len(c.store.outbox("uma")) == 1


@ON_POSTGRES
def test_a_lost_finish_reply_strands_nothing(make_cluster, pg_url: str) -> None:
    """The first finish_and_claim commits (v-1 done, v-2 claimed) and its reply is lost: a proxy
    between the run worker and PostgreSQL forwards the COMMIT and closes the connection before
    the answer reaches the worker. The worker's retry gets v-2 back and runs it at once,
    attempt 1, instead of resigning over it and leaving it running for a takeover."""
    from sqlalchemy.engine import make_url

    from reply_dropper import ReplyDropper

    url = make_url(pg_url)
    dropper = ReplyDropper((url.host or "127.0.0.1", url.port or 5432))
    try:
        through = url.set(host="127.0.0.1", port=dropper.port, query={"sslmode": "disable"})
        c = make_cluster()  # beat and control go direct; the run worker is replaced by one
        c.procs.stop(c.run_workers[0])  # whose every connection goes through the dropper
        worker = c.procs.start("runs-proxied", [
            sys.executable, "-m", "celery", "-A", "tasks", "worker", "-l", "INFO", "-n", "runsp@%h",
            "-Q", ",".join(RUN_QUEUES), "-c", "1", "--without-mingle", "--without-gossip"],
            {"WAKEFUL_DATABASE_URL": through.render_as_string(hide_password=False)})
        c.procs.wait_ready(worker)
        c.ingest("vic", "chat", "v-1", {"text": "first", "work": 1.0})
        c.wait(lambda: c.store.status("vic").holder, "the first run to start")
        c.ingest("vic", "chat", "v-2", {"text": "second"})
        c.wait(lambda: c.settled("vic", 2), "both events done")
        assert dropper.fired.is_set()  # the reply really was lost
        assert [(e.source_id, e.status, e.attempts) for e in c.store.events("vic")] == [
            ("v-1", "done", 1), ("v-2", "done", 1)]
        runs = c.store.operator.run_log("vic")
        assert [len(r.event_ids) for r in runs] == [1, 1] and {r.generation for r in runs} == {1}
        assert "retrying once" in worker.text()
        assert c.store.operator.counters()["lease_takeovers"] == 0
    finally:
        dropper.close()
