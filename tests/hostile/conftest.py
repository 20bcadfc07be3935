"""The Procfile's worker and control processes on PostgreSQL and Redis, for attacks from
the broker side. Each test gets a fresh database, a reserved Redis database number and its
own home directory; everything runs on loopback."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from databases import REDIS_HOST, REDIS_PORT, reserved_redis_db
from hostile_support import stack_env

from store import Store


@dataclass
class Doors:
    """A running wakeful (worker + control + beat) and the store and broker it uses."""

    env: dict[str, str]
    store: Store
    broker_url: str
    procs: object

    def client(self):  # type: ignore[no-untyped-def]
        """A plain Celery client: what anyone with the broker's address and password has."""
        from celery import Celery

        client = Celery("outside", broker=self.broker_url, backend=self.broker_url)
        client.conf.update(task_serializer="json", accept_content=["json"],
                           result_accept_content=["json"])
        return client

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.text()[-tail:]}" for p in self.procs.procs)

    def wait(self, condition, what: str, timeout: float = 60.0):  # type: ignore[no-untyped-def]
        from wakeful.cli.processes import wait_for

        try:
            return wait_for(condition, timeout, what)
        except TimeoutError:
            raise AssertionError(f"{what}: not within {timeout}s\n{self.logs()}") from None


@pytest.fixture
def doors(pg_url: str, tmp_path: Path) -> Iterator[Doors]:
    """Production: PostgreSQL and Redis."""
    with reserved_redis_db() as number:
        yield from _started(tmp_path / "home", pg_url, f"redis://{REDIS_HOST}:{REDIS_PORT}/{number}")


@pytest.fixture
def embedded_doors(sqlite_url: str, tmp_path: Path) -> Iterator[Doors]:
    """The default with nothing installed: a SQLite store and kombu's SQLAlchemy broker."""
    home = tmp_path / "home"
    yield from _started(home, sqlite_url, f"sqla+sqlite:///{home / 'broker.sqlite3'}")


def _started(home: Path, database_url: str, broker_url: str) -> Iterator[Doors]:
    import subprocess
    import sys

    from wakeful.cli.processes import CONTROL_QUEUES, RUN_QUEUES, Processes

    home.mkdir()
    env = stack_env(home, database_url, broker_url)
    if broker_url.startswith("sqla+"):  # what `wakeful up` does first: the broker's tables and queues
        subprocess.run([sys.executable, "-m", "wakeful.cli.main", "init"], env=env, check=True,
                       capture_output=True, timeout=120)
    store = Store.connect(database_url)
    procs = Processes(env=env, logdir=home / "logs")
    started = [procs.worker("worker", RUN_QUEUES), procs.worker("control", CONTROL_QUEUES, concurrency=2),
               procs.beat()]
    try:
        procs.wait_ready(*started, timeout=90)
        yield Doors(env, store, broker_url, procs)
    finally:
        for proc in procs.procs:
            procs.kill(proc, signal.SIGKILL)
        store.dispose()
