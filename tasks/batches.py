"""A task that takes its messages in batches: celery-batches, with wakeful's rules on top.

celery-batches (the Celery organisation's package) gives the mechanics: a strategy that
buffers each message's request in the worker's main process instead of sending it to the
pool, and hands the pool one call with a list of requests. On top of it, here:

- **The guard.** ``problem()`` (tasks/guard.py) checks every message before it is buffered,
  against the per-message signature the task declares as ``accepts``; a bad one raises
  ``InvalidTaskError`` and the consumer records and drops it alone, as for any task.
- **Flush when a pool process is free.** A lone message is not held back waiting for company
  (the latency path): it goes to the pool at once if a pool process is free. Messages pile up
  only while every pool process is busy with a batch, and the next free one takes them all
  (up to ``flush_every``). ``flush_interval`` is only a safety net.
- **Prefetch lent while buffering.** With late acks a buffered message counts against the
  worker's prefetch limit (1 x concurrency here), which would cap a batch at the pool's size.
  As Celery does for a message with an ETA, each buffered message raises the limit by one
  until it is acked, up to ``flush_every`` at a time: the runs worker's prefetch of 1 is not
  touched, and no Procfile flag is needed.
- **Acks.** Every message is acked after the batch call returns (its events committed) and
  requeued if the pool process dies under it (``error_callback``: SIGKILL, the hard time
  limit), so a worker killed mid-batch loses nothing. The batch body must never raise: it
  refuses what is bad and hands back (re-sends) what it could not store.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.exceptions import InvalidTaskError
from celery_batches import Batches, SimpleRequest
from celery_batches.trace import apply_batches_task

from tasks.guard import problem

log = logging.getLogger("wakeful.batches")


class GuardedBatches(Batches):
    abstract = True
    flush_every = 200  # the most requests one pool call takes
    flush_interval = 0.5  # seconds: a safety net; flushes happen when a pool process is free

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._in_flight = 0  # batch calls handed to the pool and not yet returned
        self._lent = 0  # prefetch slots lent to buffered messages
        self._slots = 1
        self._consumer: Any = None

    def Strategy(self, task: Batches, app: Any, consumer: Any) -> Any:  # noqa: N802 (Celery's name)
        buffer_request = super().Strategy(task, app, consumer)
        self._slots = max(1, int(getattr(consumer.pool, "limit", 1) or 1))
        self._consumer = consumer  # its qos is made after the strategies: read it when used

        def on_message(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **kw: Any) -> None:
            reason = problem(task, message)
            if reason is not None:
                raise InvalidTaskError(f"{task.name}: {reason}")
            buffer_request(message, body, ack, reject, callbacks, **kw)
            with self._lock:
                lend = self._lent < self.flush_every
                self._lent += lend
                free = self._in_flight < self._slots
            if lend:
                self._consumer.qos.increment_eventually()
            if free:
                self._do_flush()

        return on_message

    def flush(self, requests: Any) -> Any:
        requests = list(requests)
        with self._lock:
            self._in_flight += 1

        def settle(done: bool) -> None:
            for request in requests:
                if done:
                    request.acknowledge()
                else:  # the pool process died under the batch: the broker delivers them again
                    request.reject(requeue=True)
            with self._lock:
                self._in_flight -= 1
                repaid = min(self._lent, len(requests))
                self._lent -= repaid
            if repaid:
                self._consumer.qos.decrement_eventually(repaid)
            if not self._buffer.empty():
                self._do_flush()

        return self._pool.apply_async(
            apply_batches_task, (self, ([SimpleRequest.from_request(r) for r in requests],), 0, None),
            callback=lambda _result: settle(True),
            error_callback=lambda exc: _lost(settle, exc))


def _lost(settle: Any, exc: Any) -> None:
    log.warning("a batch's pool process was lost (%s); its messages are requeued", exc)
    settle(False)
