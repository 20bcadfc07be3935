"""Where the bench's workers report when they were called: one Redis list on the bench db."""

from __future__ import annotations

import os

import redis

LATENCY_KEY = "bench:latency"
PARTS_KEY = "bench:latency:parts"
_client: redis.Redis | None = None
_pid: int | None = None


def client() -> redis.Redis:
    global _client, _pid
    if _client is None or _pid != os.getpid():
        _client = redis.Redis.from_url(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9"))
        _pid = os.getpid()
    return _client


def record_latency(seconds: float) -> None:
    client().rpush(LATENCY_KEY, repr(seconds))


def record_parts(to_run_task: float, run_task_to_agent: float) -> None:
    client().rpush(PARTS_KEY, f"{to_run_task!r} {run_task_to_agent!r}")
