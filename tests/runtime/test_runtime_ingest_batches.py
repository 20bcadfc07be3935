"""``wakeful.ingest`` takes its messages in batches (tasks/batches.py, tasks/ingest.py): one
``ingest_many`` and one doorbell for the messages waiting, a bad message refused alone, every
message acked after its event is committed (real control and run workers on PostgreSQL and
Redis, and a plain Celery client)."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from wakeful.cli.processes import CONTROL_QUEUES
from tasks.celeryconfig import DEFAULT_QUEUE

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]
REDIS_PG = [pytest.param("redis_pg", marks=[pytest.mark.postgres, pytest.mark.redis])]


def _batches(c) -> list[dict]:  # type: ignore[no-untyped-def]
    text = (c.home / "logs" / "control.log").read_text()
    return [json.loads(m.replace("'", '"')) for m in re.findall(r"ingest batch: (\{[^}]*\})", text)]


def _held_until_received(c, release) -> None:  # type: ignore[no-untyped-def]
    """The first batch is held (fault point ``ingest_batch:hold``) until the control worker
    has received every message waiting in the queue: then let go. The rest wait for a pool
    process together (tasks/batches.py), so they go as one batch whatever the machine's load.
    No beat: a tick's task waiting for the held pool would fill the worker's prefetch."""
    import redis

    queue = redis.Redis.from_url(c.broker_url)
    try:
        c.wait(lambda: queue.llen(DEFAULT_QUEUE) == 0, "every message received by the control worker")
    finally:
        release.touch()
        queue.close()


@pytest.mark.parametrize("backend", REDIS_PG)
def test_waiting_messages_go_in_one_batch_and_a_bad_one_is_refused_alone(make_cluster, tmp_path) -> None:
    release = tmp_path / "release"
    c = make_cluster(env={"WAKEFUL_FAULTS": "ingest_batch:hold:1", "WAKEFUL_FAULTS_RELEASE": str(release)},
                     beat=False)
    control = next(p for p in c.procs.procs if p.name == "control")
    c.procs.stop(control)  # messages wait in the queue meanwhile
    for n in range(30):
        c.ingest(f"b{n % 5}", "chat", f"m-{n}", {"text": f"hi {n}", "silent": True})
    c.ingest("b0", "chat", "m-0", {"text": "the same key again"})  # a duplicate
    c.client.send_task("wakeful.ingest", kwargs={"inbox": "b1", "source": "chat", "source_id": "bad",
                                                  "payload": "not an object"})
    c.client.send_task("wakeful.ingest", kwargs={"inbox": "b2", "source": "chat", "source_id": "odd",
                                                  "payload": {}, "sauce": "x"})
    c.procs.wait_ready(c.procs.worker("control", CONTROL_QUEUES, concurrency=2))
    _held_until_received(c, release)
    c.wait(lambda: all(c.settled(f"b{i}", 6) for i in range(5)), "30 events stored once and run")
    assert sum(len(c.store.events(f"b{i}")) for i in range(5)) == 30
    refused = [r for r in c.store.operator.rejections() if r.origin == "task:wakeful.ingest"]
    assert sorted(r.source_id for r in refused) == ["bad", "odd"]
    assert any("payload" in r.reason for r in refused) and any("sauce" in r.reason for r in refused)
    batches = c.wait(lambda: (b := _batches(c)) and sum(x["messages"] for x in b) == 33 and b,
                     "every message in a logged batch")
    assert sum(b["stored"] for b in batches) == 30
    assert max(b["messages"] for b in batches) > 1  # they were taken together, not one by one


@pytest.mark.parametrize("backend", REDIS_PG)
def test_every_caller_of_a_batch_that_asked_gets_its_own_result(make_cluster) -> None:
    """The results of a batch are stored together (tasks/batches.py ``mark_done``; its round
    trips: test_runtime_units.py): each caller still reads its own message's."""
    c = make_cluster()
    control = next(p for p in c.procs.procs if p.name == "control")
    c.procs.stop(control)  # the messages wait, to be taken as one batch
    sent = [c.client.send_task("wakeful.ingest", kwargs={"inbox": "r", "source": "chat", "source_id": key,
                                                         "payload": payload})
            for key, payload in [("m-1", {"text": "hi"}), ("m-2", {"text": "there"}), ("m-1", {"text": "again"}),
                                 ("bad", "not an object")]]
    c.procs.wait_ready(c.procs.worker("control", CONTROL_QUEUES, concurrency=2))
    results = [r.get(timeout=60, interval=0.05) for r in sent]
    assert results[:3] == [{"stored": True}, {"stored": True}, {"stored": False, "duplicate": True}]
    assert results[3]["stored"] is False and "payload" in results[3]["rejected"]


@pytest.mark.parametrize("backend", REDIS_PG)
def test_a_pool_process_killed_mid_batch_loses_nothing(make_cluster, tmp_path) -> None:
    """The batch's pool process is SIGKILLed after writing and before its COMMIT: nothing was
    committed, its messages were not acked; they come back and are stored once each."""
    log_path = tmp_path / "faults.jsonl"
    c = make_cluster(env={"WAKEFUL_FAULTS": "before_ingest_commit:sleep=4",
                          "WAKEFUL_FAULTS_LOG": str(log_path)})
    for n in range(12):
        c.ingest(f"k{n % 3}", "chat", f"m-{n}", {"text": f"hi {n}", "silent": True})

    def reached() -> list[dict]:
        lines = log_path.read_text().splitlines() if log_path.exists() else []
        return [json.loads(line) for line in lines if "before_ingest_commit" in line]

    first = c.wait(lambda: reached()[:1], "a batch before its commit")[0]
    os.kill(first["pid"], signal.SIGKILL)
    c.wait(lambda: all(c.settled(f"k{i}", 4) for i in range(3)), "every event stored and run", timeout=60)
    assert sum(len(c.store.events(f"k{i}")) for i in range(3)) == 12
    assert all(e.attempts == 1 for i in range(3) for e in c.store.events(f"k{i}"))
    assert len({r["pid"] for r in reached()}) >= 2  # a second pool process took the batch again


@pytest.mark.parametrize("backend", REDIS_PG)
def test_a_database_outage_during_a_batch_loses_nothing(make_cluster, pg_url) -> None:
    """The test's own database refuses every connection (its open ones terminated) while
    messages arrive: the batch is tried again, then handed back to the broker; once the
    database is back every event is stored once, and nothing was refused for the outage."""
    from databases import PG_ADMIN_URL
    from sqlalchemy import create_engine, make_url, text

    c = make_cluster()
    name = make_url(pg_url).database
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_size=1)

    def database(open_: bool) -> None:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(open_).lower()}'))
            if not open_:
                conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE datname = :name"), {"name": name})

    control_log = c.home / "logs" / "control.log"
    try:
        database(False)
        for n in range(10):
            c.ingest(f"o{n % 2}", "chat", f"m-{n}", {"text": f"hi {n}", "silent": True})
        c.wait(lambda: "messages sent back for later" in control_log.read_text(),
               "the batch handed back to the broker", timeout=60)
    finally:
        database(True)
        admin.dispose()
    c.store.dispose()  # its pooled connections were terminated
    c.wait(lambda: all(c.settled(f"o{i}", 5) for i in range(2)), "every event stored and run", timeout=90)
    assert sorted(e.source_id for i in range(2) for e in c.store.events(f"o{i}")) == sorted(
        f"m-{n}" for n in range(10))
    assert [r for r in c.store.operator.rejections() if r.origin == "task:wakeful.ingest"] == []


def _reached(log_path) -> list[dict]:  # type: ignore[no-untyped-def]
    lines = log_path.read_text().splitlines() if log_path.exists() else []
    return [json.loads(line) for line in lines if "before_ingest_commit" in line]


@pytest.mark.parametrize("backend", REDIS_PG)
def test_a_batch_that_raises_is_run_again_one_message_at_a_time(make_cluster, tmp_path) -> None:
    """A batch raises before its commit (an unexpected error, not an outage): its messages
    are not requeued together but run again one at a time, each acked as it is stored;
    nothing is refused."""
    log_path = tmp_path / "faults.jsonl"
    release = tmp_path / "release"
    c = make_cluster(env={"WAKEFUL_FAULTS": "ingest_batch:hold:1,before_ingest_commit:raise:2",
                          "WAKEFUL_FAULTS_LOG": str(log_path), "WAKEFUL_FAULTS_RELEASE": str(release)},
                     beat=False)
    control = next(p for p in c.procs.procs if p.name == "control")
    c.procs.stop(control)  # the messages wait: the first goes alone (nothing in flight), the rest together
    for n in range(8):
        c.ingest(f"r{n % 2}", "chat", f"m-{n}", {"text": f"hi {n}", "silent": True})
    # One pool process, so its second batch (the one that raises) is the seven waiting messages.
    c.procs.wait_ready(c.procs.worker("control", CONTROL_QUEUES, concurrency=1))
    _held_until_received(c, release)
    c.wait(lambda: all(c.settled(f"r{i}", 4) for i in range(2)), "every event stored and run", timeout=60)
    assert sorted(e.source_id for i in range(2) for e in c.store.events(f"r{i}")) == sorted(
        f"m-{n}" for n in range(8))
    assert [r for r in c.store.operator.rejections() if r.origin == "task:wakeful.ingest"] == []
    reached = _reached(log_path)
    raised = [n for n, r in enumerate(reached) if r["action"] == "raise"]
    assert len(raised) == 1 and reached[raised[0]]["messages"] > 1
    again = reached[raised[0] + 1:raised[0] + 1 + reached[raised[0]]["messages"]]
    assert [r["messages"] for r in again] == [1] * reached[raised[0]]["messages"]  # one at a time


@pytest.mark.parametrize("backend", REDIS_PG)
def test_a_message_the_task_always_raises_on_is_sent_back_then_recorded(make_cluster, tmp_path) -> None:
    """Every ingest raises: a message is sent back with a countdown (not requeued at once,
    which would loop forever), and one that comes back the fourth time is recorded as
    rejected, with the error, and dropped."""
    log_path = tmp_path / "faults.jsonl"
    c = make_cluster(env={"WAKEFUL_FAULTS": "before_ingest_commit:raise", "WAKEFUL_FAULTS_LOG": str(log_path)})
    c.client.send_task("wakeful.ingest", kwargs={"inbox": "p", "source": "chat", "source_id": "last-try",
                                                  "payload": {}}, headers={"wakeful_ingest_failures": 3})
    refused = c.wait(lambda: [r for r in c.store.operator.rejections() if r.source_id == "last-try"],
                     "the fourth failure recorded", timeout=30)
    assert "raised on this message 4 times: FaultRaised" in refused[0].reason
    assert refused[0].origin == "task:wakeful.ingest" and refused[0].inbox == "p"

    c.client.send_task("wakeful.ingest", kwargs={"inbox": "p", "source": "chat", "source_id": "first-try",
                                                  "payload": {}})
    control_log = c.home / "logs" / "control.log"
    c.wait(lambda: "messages sent back for later (FaultRaised" in control_log.read_text(),
           "the message sent back with a countdown", timeout=30)
    before = len(_reached(log_path))
    import time

    time.sleep(2)  # within the 5 s countdown: it does not come back meanwhile
    assert len(_reached(log_path)) == before
    assert [r.source_id for r in c.store.operator.rejections() if r.inbox == "p"] == ["last-try"]
    assert c.store.events("p") == []
