"""``wakeful requeue`` and ``wakeful answer`` ring a real doorbell: the ``wakeful`` command in
its own process, a PostgreSQL store and a Redis broker on a database number of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from databases import REDIS_HOST, REDIS_PORT, reserved_redis_db

from store import Store

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


@pytest.fixture
def redis_number() -> Iterator[int]:
    with reserved_redis_db(wait_s=60) as number:
        yield number


def rings(number: int) -> list[tuple[str, str]]:
    """The doorbells waiting on the runs queue: (task name, its arguments)."""
    import redis

    queued = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=number).lrange("wakeful.runs", 0, -1)
    return [(m["headers"]["task"], m["headers"]["argsrepr"]) for m in map(json.loads, queued)]


def test_requeue_and_answer_ring_the_inbox(pg_url: str, redis_number: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = Store.connect(pg_url, max_attempts=1)
    try:
        store.ingest("alice", "chat", "p-1", {}, now=1000)
        gen = store.acquire("alice", "w", now=1000)
        [event] = store.claim("alice", "w", gen, now=1000)
        store.finish("alice", "w", gen, [event.id], error="ValueError: poison", now=1000)
        store.release("alice", "w", gen, now=1000)
        store.request_approval("bob", "refund-1", "refund", 3600)
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEFUL_")}
        env.update(WAKEFUL_DATABASE_URL=pg_url, WAKEFUL_HOME=str(tmp_path / "home"),
                   WAKEFUL_BROKER_URL=f"redis://{REDIS_HOST}:{REDIS_PORT}/{redis_number}")

        def wakeful(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "wakeful.cli.main", *args], env=env,
                                  capture_output=True, text=True, timeout=60)

        requeued = wakeful("requeue", str(event.id), "--json")
        assert requeued.returncode == 0, requeued.stderr
        assert json.loads(requeued.stdout)["requeued"][0]["attempts"] == 0
        assert rings(redis_number) == [("wakeful.run_inbox", "['alice']")]
        answered = wakeful("answer", "bob", "refund-1", "yes")
        assert answered.returncode == 0 and answered.stdout.strip() == "yes", answered.stderr
        # Coalesced: alice's task is queued and not started, and will drain bob's answer
        # (stored before the ring) from the database, so bob's ring sends nothing.
        assert rings(redis_number) == [("wakeful.run_inbox", "['alice']")]
        assert [e.source for e in store.events("bob")] == ["approval"]
        assert store.events("alice")[0].status == "pending"
        assert not (tmp_path / "home").exists()  # nothing embedded was created
    finally:
        store.dispose()
