"""A Redis restart without persistence loses every queued doorbell: nothing is lost.

A private redis-server (its own port, no persistence) is started for this test so it can be
killed and restarted without touching anyone else's Redis. The workers must reconnect and
consume again (celery#9054 and friends: workers that silently stop consuming after a
reconnect), and the sweep must re-ring the inbox whose doorbell vanished with the restart.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis as redis_py

from wakeful.cli.processes import free_port

pytestmark = [pytest.mark.processes, pytest.mark.redis]


class PrivateRedis:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        client = redis_py.Redis(port=self.port, socket_timeout=1)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                return
            except redis_py.ConnectionError:
                assert time.monotonic() < deadline, "private redis-server did not start"
                time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture
def private_redis(tmp_path: Path):
    if shutil.which("redis-server") is None:
        from databases import service_missing

        service_missing("redis-server (to run a private instance)", "not installed")
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.kill()


def queued_ids(server: PrivateRedis) -> set[str]:
    """The task ids of the run messages waiting in the server's queue."""
    raw = redis_py.Redis(port=server.port).lrange("wakeful.runs", 0, -1)
    return {json.loads(message)["headers"]["id"] for message in raw}


@pytest.mark.parametrize("backend", [pytest.param("redis_pg", marks=[pytest.mark.postgres])])
def test_queued_doorbells_lost_in_a_redis_restart_cost_nothing(make_cluster, private_redis) -> None:
    c = make_cluster(broker_url=private_redis.url, run_slots=1)  # one slot: a doorbell waits in Redis
    c.ingest("nia", "chat", "n-1", {"text": "before the restart"})
    c.wait(lambda: c.settled("nia", 1), "the first event")

    # The run worker is busy (its message unacked), so the next doorbell waits in Redis ...
    c.ingest("ola", "chat", "o-1", {"text": "a long one", "work": 3.0})
    c.wait(lambda: c.store.status("ola").holder, "the long run to start")
    assert c.store.ingest("nia", "chat", "n-2", {"text": "rung into the void"})
    doorbell = c.client.send_task("wakeful.run_inbox", args=["nia"], queue="wakeful.runs").id
    c.wait(lambda: doorbell in queued_ids(private_redis), "the doorbell to wait in Redis")
    # ... and Redis dies and comes back empty: the doorbell and the unacked message are gone.
    # (Not "the queue is empty": a sweep may ring into the new Redis at once.)
    private_redis.kill()
    private_redis.start()
    assert doorbell not in queued_ids(private_redis)

    # The long run finishes through the database; the sweep rings nia again; both workers
    # reconnected (none exited on the lost connection).
    c.wait(lambda: c.settled("ola", 1), "the long run to finish", timeout=60)
    c.wait(lambda: c.settled("nia", 2), "the sweep to re-ring after the restart", timeout=60)
    # New work after the restart flows end to end (send_task -> ingest -> run).
    c._client = None  # a fresh client: the old one's pooled connections died with Redis
    c.ingest("nia", "chat", "n-3", {"text": "after the restart"})
    c.wait(lambda: c.settled("nia", 3), "an event sent after the restart", timeout=60)
    assert [(e.status, e.attempts) for e in c.store.events("nia")] == [("done", 1)] * 3
    assert [(e.status, e.attempts) for e in c.store.events("ola")] == [("done", 1)]
    assert all(p.alive() for p in c.procs.procs), c.logs()
    assert "Unrecoverable error" not in c.logs(tail=10**7)
