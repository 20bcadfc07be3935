"""The raw Celery peer: the same broker, the same Celery settings as wakeful's app.

Its configuration is ``tasks.celeryconfig.celery_config`` itself, so prefetch, late acks,
reject-on-worker-lost, serializers and transport options cannot drift from wakeful's.
"""

from __future__ import annotations

import time

from celery import Celery

from wakeful.settings import RuntimeSettings
from tasks.celeryconfig import celery_config

from bench.probe import record_latency

QUEUE = "bench.peer"


class Peer(Celery):
    def on_configure(self) -> None:  # as wakeful's app: the settings on the first read of app.conf
        self.config_from_object({**celery_config(RuntimeSettings.from_env()),
                                 "task_routes": {"bench.*": {"queue": QUEUE}}, "beat_schedule": {}})


app = Peer("bench_peer")


@app.task(name="bench.noop")
def noop() -> None:
    """Nothing: the broker and the worker's consumer loop are all that is measured."""


@app.task(name="bench.probe")
def probe(sent: float) -> None:
    """Send -> task start, the peer's half of the wake-latency figure."""
    record_latency(time.time() - sent)


SPANS_KEY = "bench:agents:peer"
_spans_client = None


def _spans():  # type: ignore[no-untyped-def]
    """One client per process whose pool blocks when all its connections are busy: redis-py
    8's default pool raises MaxConnectionsError past 100 connections, which 1,000 threads
    finishing at once reach (seen: 183 of 400 tasks failed with it)."""
    global _spans_client
    if _spans_client is None:
        import os

        import redis

        pool = redis.BlockingConnectionPool.from_url(os.environ["BENCH_REDIS_URL"], max_connections=32, timeout=120)
        _spans_client = redis.Redis(connection_pool=pool)
    return _spans_client


@app.task(name="bench.wait")
def wait(seconds: float, sent: float) -> None:
    """The agents section's Celery peer (bench/waiting.py): a task that waits as an agent
    waits on its model, then says when it started and ended (the worker's pool and
    concurrency are the wakeful worker's, so the difference is wakeful's own)."""
    started = time.time()
    time.sleep(seconds)
    ended = time.time()
    _spans().rpush(SPANS_KEY, f"{sent!r} {started!r} {ended!r}")
