"""The runtime through PgBouncer in transaction pooling mode: real worker, control and beat
processes whose every database connection goes through a real PgBouncer 1.18."""

from __future__ import annotations

import pytest
from pgbouncer import running_pgbouncer, server_connections, through

from wakeful.cli.processes import holder_pid, pgid_of

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]


@pytest.mark.parametrize("backend", [pytest.param("redis_pg", marks=[pytest.mark.postgres, pytest.mark.redis])])
def test_the_core_scenarios_run_through_pgbouncer(make_cluster, pg_url: str) -> None:
    with running_pgbouncer() as port:
        c = make_cluster(run_workers=2, env={"WAKEFUL_DATABASE_URL": through(pg_url, port),
                                             "WAKEFUL_DATABASE_POOLER": "transaction"})
        # a burst while the agent is busy: batched into one run
        c.ingest("ann", "chat", "a-0", {"text": "first", "work": 1.0})
        c.wait(lambda: c.store.status("ann").holder, "ann's first run to start")
        for i in (1, 2, 3):
            c.ingest("ann", "chat", f"a-{i}", {"text": f"more {i}"})
        # a poison event next to a healthy one
        c.ingest("bo", "chat", "p-1", {"text": "poison", "fail": "boom"})
        c.ingest("bo", "chat", "h-1", {"text": "healthy"})
        # a recurring timer
        c.ingest("cy", "chat", "t-0", {"text": "tick", "every": 1, "timer_id": "t", "silent": True})
        c.wait(lambda: c.settled("ann", 4) and c.settled("bo", 2), "the burst and the poison settled", timeout=60)
        assert [len(r.event_ids) for r in c.store.operator.run_log("ann")] == [1, 3]
        # The healthy neighbour is done: at its second attempt when the first claim took it
        # beside the poison (the usual case), at its first when it arrived after that claim (a
        # loaded box): either way the poison alone is dead, at the cap.
        events = {e.source_id: e for e in c.store.events("bo")}
        assert (events["p-1"].status, events["p-1"].attempts) == ("dead", 3)
        assert events["h-1"].status == "done" and events["h-1"].attempts in (1, 2)
        c.wait(lambda: len([e for e in c.store.events("cy") if e.source == "timer" and e.status == "done"]) >= 2,
               "two timer ticks")
        c.store.cancel_timer("cy", "t")
        # a worker killed mid-run: the other takes the inbox over, attempts 2
        c.ingest("dee", "chat", "d-1", {"text": "slow", "slow_first_attempt": 60})
        holder = c.wait(lambda: c.store.status("dee").holder, "dee's run to start")
        [victim] = [w for w in c.run_workers if pgid_of(holder_pid(holder) or 0) == w.pid]
        c.procs.kill(victim)
        c.wait(lambda: c.settled("dee", 1), "dee's event finished by the other worker", timeout=45)
        assert [(e.status, e.attempts) for e in c.store.events("dee")] == [("done", 2)]
        assert c.store.operator.counters()["lease_takeovers"] == 1
        database = c.store.engine.url.database
        assert 0 < server_connections(port, database) <= 10  # every process shares PgBouncer's pool
