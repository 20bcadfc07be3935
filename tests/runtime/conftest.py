"""Real worker and beat processes for the runtime tests. No eager mode, no mocks.

Each test gets its own cluster: its own store (a fresh migrated PostgreSQL database, or a
SQLite file in its tmp dir), its own broker (a Redis database number reserved for it, or an
embedded SQLite broker in its tmp dir), its own home directory and logs. Intervals and TTLs
are short and set through the environment, exactly as a user would set them.

Backends: ``embedded`` (SQLite store + SQLite broker: the default with nothing configured)
and ``redis_pg`` (PostgreSQL store + Redis broker: production). A missing service skips the
test on a laptop and fails it when ``WAKEFUL_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from databases import REDIS_HOST, REDIS_PORT, rabbitmq_vhost, reserved_redis_db

from store import Store


# Short real intervals: every wait below is for something that happens within seconds.
FAST_ENV = {
    "WAKEFUL_LEASE_TTL": "2",
    "WAKEFUL_MAX_ATTEMPTS": "3",
    "WAKEFUL_BACKOFF_BASE": "1",
    "WAKEFUL_BACKOFF_MAX": "2",
    "WAKEFUL_OUTBOX_GAP": "4",
    "WAKEFUL_SCAN_INTERVAL": "0.5",
    "WAKEFUL_SWEEP_INTERVAL": "0.5",
    "WAKEFUL_DISPATCH_INTERVAL": "0.5",
    "WAKEFUL_AGENT": "wakeful.agent.demo:agent",
}


# --- Redis: one database number per test, reserved in db 0 so parallel runs never share ---
@pytest.fixture
def redis_db() -> Iterator[int]:
    with reserved_redis_db() as number:
        yield number


@pytest.fixture
def rabbitmq_url() -> Iterator[str]:
    with rabbitmq_vhost() as url:
        yield url


@dataclass
class Cluster:
    """One test's wakeful: processes, the store they share, a plain Celery client."""

    backend: str
    home: Path
    env: dict[str, str]
    store: Store
    broker_url: str
    result_url: str
    procs: Any = None
    run_workers: list[Any] = field(default_factory=list)
    _client: Any = None

    # --- outside world -------------------------------------------------------------
    @property
    def client(self) -> Any:
        """A plain Celery client: configured by hand, nothing from wakeful."""
        if self._client is None:
            from celery import Celery

            if self.broker_url.startswith("sqla+"):
                from kombu.transport import sqlalchemy as sqla

                sqla.Transport.polling_interval = 0.05
            self._client = Celery("outside", broker=self.broker_url, backend=self.result_url)
            self._client.conf.update(task_serializer="json", accept_content=["json"],
                                     result_accept_content=["json"])
        return self._client

    def ingest(self, inbox: str, source: str, source_id: str, payload: dict[str, Any],
               want_result: bool = False) -> Any:
        result = self.client.send_task("wakeful.ingest", kwargs={
            "inbox": inbox, "source": source, "source_id": source_id, "payload": payload},
            ignore_result=not want_result)
        return result.get(timeout=30, interval=0.05) if want_result else None

    def send(self, name: str, want_result: bool = False, **kwargs: Any) -> Any:
        result = self.client.send_task(name, kwargs=kwargs, ignore_result=not want_result)
        return result.get(timeout=30, interval=0.05) if want_result else None

    # --- looking at the store ------------------------------------------------------
    def settled(self, inbox: str, count: int) -> bool:
        events = self.store.events(inbox)
        return len(events) >= count and all(e.status in ("done", "dead") for e in events)

    def wait(self, condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        from wakeful.cli.processes import wait_for

        try:
            return wait_for(condition, timeout, what)
        except TimeoutError:
            raise AssertionError(f"{what}: not within {timeout}s\n{self.logs()}") from None

    def logs(self, tail: int = 4000) -> str:
        if self.procs is None:
            return ""
        return "\n".join(f"--- {p.name} ---\n{p.text()[-tail:]}" for p in self.procs.procs)

    def sent(self, inbox: str) -> list[dict[str, Any]]:
        path = self.home / "sent.jsonl"
        if not path.exists():
            return []
        lines = [json.loads(line) for line in path.read_text().splitlines() if line]
        return [line for line in lines if line["inbox"] == inbox]


def _stack_env(home: Path, database_url: str, broker_url: str, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEFUL_", "FLOWER_"))}
    env.update(FAST_ENV)
    env.update({
        "WAKEFUL_HOME": str(home),
        "WAKEFUL_DATABASE_URL": database_url,
        "WAKEFUL_BROKER_URL": broker_url,
        "WAKEFUL_OUTBOX_CHANNEL": f"jsonl:{home / 'sent.jsonl'}",
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra)
    return env


@pytest.fixture(params=["embedded", pytest.param("redis_pg", marks=[pytest.mark.postgres,
                                                                  pytest.mark.redis])])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_cluster(backend: str, request: pytest.FixtureRequest, tmp_path: Path
                 ) -> Iterator[Callable[..., Cluster]]:
    """``make_cluster(run_workers=1, env={...})``: start this test's processes, ready."""
    made: list[Cluster] = []
    # Set up the store and broker fixtures now, so they are torn down after the processes.
    if backend == "embedded":
        database_url = request.getfixturevalue("sqlite_url")
    else:
        database_url = request.getfixturevalue("pg_url")
    if backend == "redis_pg":
        redis_number = request.getfixturevalue("redis_db")
    if backend == "rabbit_pg":
        rabbit_url = request.getfixturevalue("rabbitmq_url")

    def make(run_workers: int = 1, env: dict[str, str] | None = None, beat: bool = True,
             broker_url: str | None = None, run_slots: int = 20) -> Cluster:
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        if backend == "embedded":
            assert broker_url is None, "the embedded backend has its own broker"
            broker_url = f"sqla+sqlite:///{home / 'broker.sqlite3'}"
            result_url = f"db+sqlite:///{home / 'results.sqlite3'}"
        elif backend == "rabbit_pg":  # RabbitMQ with nothing set but the broker's URL
            broker_url = broker_url or rabbit_url
            result_url = "rpc://"
        else:
            broker_url = broker_url or f"redis://{REDIS_HOST}:{REDIS_PORT}/{redis_number}"
            result_url = broker_url
        full_env = _stack_env(home, database_url, broker_url, env or {})
        store = Store.connect(database_url)
        store.migrate()
        cluster = Cluster(backend, home, full_env, store, broker_url, result_url)
        made.append(cluster)
        _start(cluster, run_workers, beat, run_slots)
        return cluster

    yield make
    for cluster in made:
        if cluster.procs is not None:
            for proc in cluster.procs.procs:  # the store decides what is true: no grace needed
                cluster.procs.kill(proc, signal.SIGKILL)
        if cluster._client is not None:
            cluster._client.close()
        cluster.store.dispose()


def _start(cluster: Cluster, run_workers: int, beat: bool, run_slots: int) -> None:
    from wakeful.cli.processes import CONTROL_QUEUES, RUN_POOL, RUN_QUEUES, Processes

    # What `wakeful init` does before a Procfile starts: the embedded broker's tables and
    # queues, so the processes below do not race to create them. (The store is migrated
    # already; Redis needs nothing.) In this process, through the test's own client: a
    # `wakeful init` subprocess per test cost its start-up (the command has tests of its own).
    if cluster.backend == "embedded":
        from tasks import embedded
        from tasks.celeryconfig import QUEUES

        embedded.init(cluster.client, QUEUES)
    procs = Processes(env=cluster.env, logdir=cluster.home / "logs")
    cluster.procs = procs
    # The Procfile's dense run worker (fewer threads: a test's inboxes are few); one slot is
    # the old prefork shape, for a test that needs a doorbell to wait in the broker.
    pool = RUN_POOL if run_slots > 1 else "prefork"
    started = [procs.worker(f"runs{i}", RUN_QUEUES, concurrency=run_slots, pool=pool) for i in range(run_workers)]
    cluster.run_workers = list(started)
    started.append(procs.worker("control", CONTROL_QUEUES, concurrency=2))
    if beat:
        started.append(procs.beat())
    procs.wait_ready(*started)
