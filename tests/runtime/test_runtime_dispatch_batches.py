"""``wakeful.dispatch_outbox`` takes its messages in batches (tasks/outbox.py): the messages
waiting are one dispatch of the inboxes they name, those rung meanwhile, and what is due when
a tick is among them; each held message goes out once (real control and run workers on
PostgreSQL and Redis)."""

from __future__ import annotations

import pytest

from wakeful.cli.processes import CONTROL_QUEUES
from tasks.celeryconfig import OUTBOX_QUEUE, RUNS_QUEUE

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]
REDIS_PG = [pytest.param("redis_pg", marks=[pytest.mark.postgres, pytest.mark.redis])]
NAMES = [f"d{n}" for n in range(4)]


@pytest.mark.parametrize("backend", REDIS_PG)
def test_waiting_dispatch_messages_send_every_held_reply_once(make_cluster) -> None:
    c = make_cluster(beat=False)  # no tick but the one sent below
    control = next(p for p in c.procs.procs if p.name == "control")
    c.procs.stop(control)  # the dispatch messages wait in the queue meanwhile
    for name in NAMES:
        assert c.store.ingest(name, "chat", "1", {"text": f"hello {name}"})
        c.client.send_task("wakeful.run_inbox", args=[name], queue=RUNS_QUEUE)
    c.wait(lambda: all(c.settled(name, 1) and c.store.outbox(name) for name in NAMES),
           "four runs done, each reply held")
    assert all(row.sent_at is None for name in NAMES for row in c.store.outbox(name))
    # Beside the runs' own (coalesced) ring: one naming an inbox, one tick.
    c.client.send_task("wakeful.dispatch_outbox", kwargs={"inbox": "d0"}, queue=OUTBOX_QUEUE)
    c.client.send_task("wakeful.dispatch_outbox", queue=OUTBOX_QUEUE)
    c.procs.wait_ready(c.procs.worker("control", CONTROL_QUEUES, concurrency=2))
    c.wait(lambda: all(row.sent_at is not None for name in NAMES for row in c.store.outbox(name)),
           "every held reply sent")
    sent = [line for name in NAMES for line in c.sent(name)]
    assert sorted(line["inbox"] for line in sent) == NAMES  # each once
    assert [line["body"] for line in c.sent("d2")] == ["hello d2"]
    assert "ERROR" not in c.logs(tail=10**6) and "Traceback" not in c.logs(tail=10**6)
