"""Throughput of a Celery queue drained by a warm worker: the queue is filled while the
worker's consumer is cancelled, then the consumer is added back and the clock runs until
the queue is empty and nothing is left unacked (late acks: acked = finished)."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from bench.cpu import CpuMeter, worker_kinds
from bench.env import Worker


def drained(r: redis.Redis, queue: str) -> bool:
    # kombu's Redis transport: the queue is a list, delivered-but-unacked messages a hash.
    # Plain commands, no pipeline: they stay on ``r``'s own connection (see bench/cost.py).
    return r.llen(queue) == 0 and r.hlen("unacked") == 0


def wait_drained(r: redis.Redis, queue: str, timeout: float, extra: Callable[[], bool] | None = None,
                 poll: float = 0.003) -> float:
    """Seconds until the queue is drained (and ``extra()`` holds); raises on timeout."""
    start = time.perf_counter()
    deadline = start + timeout
    while True:
        if drained(r, queue) and (extra is None or extra()):
            return time.perf_counter() - start
        if time.perf_counter() > deadline:
            raise TimeoutError(f"queue {queue!r} not drained after {timeout:.0f}s")
        time.sleep(poll)


def drain_rate(app, worker: Worker, queue: str, n: int, fill: Callable[[], None], r: redis.Redis,
               timeout: float = 300, extra: Callable[[], bool] | None = None,
               cpu: dict[str, float] | None = None) -> float:
    """Messages per second: ``fill()`` puts ``n`` messages on ``queue`` while ``worker``
    does not consume it, then the worker drains them. ``cpu``, if given, receives the CPU
    milliseconds per message each kind of process spent during the drain (bench/cpu.py)."""
    wait_drained(r, queue, timeout)
    reply = app.control.cancel_consumer(queue, destination=[worker.nodename], reply=True, timeout=5)
    if not reply:
        raise RuntimeError(f"{worker.name} did not answer cancel_consumer")
    fill()
    with CpuMeter(worker_kinds(worker.popen.pid, worker.children())) as meter:
        start = time.perf_counter()
        reply = app.control.add_consumer(queue, destination=[worker.nodename], reply=True, timeout=5)
        if not reply:
            raise RuntimeError(f"{worker.name} did not answer add_consumer")
        # Polled every 10 ms, as procrastinate's drain is: the bench shares the two cores it
        # measures (polling every 3 ms took 0.66 ms of CPU per event drained at one per wake,
        # every 10 ms 0.23-0.27 ms; bench/cpu.py).
        elapsed = (time.perf_counter() - start) + wait_drained(r, queue, timeout, extra, poll=0.01)
    if cpu is not None:
        cpu.update(meter.per_item(n))
    worker.sample_rss()
    return n / elapsed
