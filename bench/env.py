"""What the bench runs on: its own PostgreSQL databases, one Redis db, worker processes.

Everything is on loopback and named so it cannot touch anyone else's data: databases are
``wakeful_bench_*`` (created and dropped here), Redis is one db number (only that one is
ever flushed), and every process the bench starts gets its own process group and is
stopped by its own id.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis

PG_HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("BENCH_PG_PORT", "5432"))
PG_USER = os.environ.get("BENCH_PG_USER", "postgres")
# Where the bench's broker lives: BENCH_REDIS_URL, else a db number reserved for the run
# (bench_redis_db); 9 is only the host, port and fallback for modules run on their own.
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from databases import RESERVATION_KEY, redis_reservation  # noqa: E402  (tests/databases.py: one rule)

# The same worker shape for wakeful and for every Celery peer (issue 5): prefork x2,
# prefetch 1, late acks (the latter two come from tasks.celeryconfig for both apps).
POOL, CONCURRENCY, PREFETCH = "prefork", 2, 1


class PeerMissing(Exception):
    """A section's peer or tool is not on this machine: the section is skipped with this
    one-line reason, and the rest of the bench runs."""


def pg_conninfo(db: str = "postgres") -> str:
    return f"host={PG_HOST} port={PG_PORT} user={PG_USER} dbname={db}"


def sqlalchemy_url(db: str) -> str:
    return f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{PG_PORT}/{db}"


def admin(sql: str) -> None:
    with psycopg.connect(pg_conninfo(), autocommit=True) as conn:
        conn.execute(sql)


def create_database(name: str) -> str:
    assert name.startswith("wakeful_bench_"), name
    drop_database(name)
    admin(f'CREATE DATABASE "{name}"')
    return name


def drop_database(name: str) -> None:
    assert name.startswith("wakeful_bench_"), name
    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sql(db: str, statement: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(pg_conninfo(db), autocommit=True) as conn:
        cur = conn.execute(statement, params or None)
        return cur.fetchall() if cur.description else []


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL)


def redis_client_for(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def flush_redis() -> None:
    redis_client().flushdb()  # only our db number


@contextmanager
def reserved_redis_db(wait_s: float = 120) -> Iterator[str]:
    """The URL of a Redis database number reserved for this block, as the tests reserve
    theirs (tests/databases.py ``redis_reservation``), so a bench and a test suite running at
    once never flush each other's queues."""
    base = REDIS_URL.rsplit("/", 1)[0]
    with redis_reservation(base, wait_s) as number:
        yield f"{base}/{number}"


@contextmanager
def bench_redis_db() -> Iterator[str]:
    """The Redis database of a whole bench run: ``BENCH_REDIS_URL`` when it is set (the
    caller's choice, flushed as asked), else a number reserved like the tests' (renewed while
    the run lasts), so the bench never flushes a database a test suite is using."""
    global REDIS_URL
    if os.environ.get("BENCH_REDIS_URL"):
        yield REDIS_URL
        return
    import threading

    with reserved_redis_db() as url:
        before, REDIS_URL = REDIS_URL, url
        done = threading.Event()

        def renew() -> None:
            while not done.wait(300):
                extend_redis_reservation(url)

        threading.Thread(target=renew, daemon=True).start()
        try:
            yield url
        finally:
            done.set()
            REDIS_URL = before


def extend_redis_reservation(url: str) -> None:
    """Keep a reservation past its 15 minutes (a long section calls this now and then)."""
    base, number = url.rsplit("/", 1)
    redis.Redis.from_url(base + "/0", socket_timeout=3).expire(RESERVATION_KEY.format(number), 900)


def base_env(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "WAKEFUL_HOME": str(home),
        "WAKEFUL_BROKER_URL": REDIS_URL,
        "WAKEFUL_TASK_EVENTS": "false",
        "BENCH_REDIS_URL": REDIS_URL,
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    })
    env.update(extra)
    return env


@dataclass
class Worker:
    """One Celery worker (main process + prefork children) in its own process group."""

    name: str
    app: str
    queues: tuple[str, ...]
    env: dict[str, str]
    logdir: Path
    concurrency: int = CONCURRENCY
    pool: str = POOL
    popen: subprocess.Popen | None = None
    log: Path | None = None
    peak_rss_kb: dict[int, int] = field(default_factory=dict)

    @property
    def nodename(self) -> str:
        return f"{self.name}@bench"

    def start(self) -> "Worker":
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.log = self.logdir / f"{self.name}.log"
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", self.app, "worker", "-l", "WARNING",
                 "-n", self.nodename, "-Q", ",".join(self.queues), "-P", self.pool,
                 "-c", str(self.concurrency), "--prefetch-multiplier", str(PREFETCH),
                 "--without-mingle", "--without-gossip", "--without-heartbeat"],
                env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def wait_ready(self, control, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited: see {self.log}")
            if control.ping(destination=[self.nodename], timeout=0.5):
                if self.pool != "prefork" or len(self.children()) >= self.concurrency:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"worker {self.name} not ready after {timeout}s: see {self.log}")

    def children(self) -> list[int]:
        try:
            text = Path(f"/proc/{self.popen.pid}/task/{self.popen.pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def sample_rss(self) -> None:
        """Remember each process's peak RSS (VmHWM) while it is alive."""
        for pid in [self.popen.pid, *self.children()]:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        kb = int(line.split()[1])
                        self.peak_rss_kb[pid] = max(kb, self.peak_rss_kb.get(pid, 0))
            except OSError:
                pass

    def peak_rss_mb(self) -> float:
        return max(self.peak_rss_kb.values(), default=0) / 1024

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.sample_rss()
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)
        except ProcessLookupError:
            pass
