"""A task that takes its messages in batches: celery-batches, with wakeful's rules on top.

celery-batches (the Celery organisation's package) gives the mechanics: a strategy that
buffers each message's request in the worker's main process instead of sending it to the
pool, and hands the pool one call with a list of requests. On top of it, here:

- **The guard.** ``problem()`` (tasks/guard.py) checks every message before it is buffered,
  against the per-message signature the task declares as ``accepts``; a bad one raises
  ``InvalidTaskError`` and the consumer records and drops it alone, as for any task.
- **Flush at ``flush_every`` messages or every ``flush_interval``** (20 ms), and whenever a
  batch returns with messages waiting. A lone message waits at most one tick. Flushing the
  moment a pool process was free (tried first) made batches of one under load: the worker's
  main process, which receives and acks every message, is the bottleneck, so a pool process
  was nearly always free (measured: 1.4 ms of pool CPU per ingest against 0.8 for a no-op).
- **Prefetch lent while buffering.** With late acks a buffered message counts against the
  worker's prefetch limit (1 x concurrency here), which would cap a batch at the pool's size.
  As Celery does for a message with an ETA, each buffered message raises the limit by one
  until it is acked, up to ``flush_every`` at a time: the runs worker's prefetch of 1 is not
  touched, and no Procfile flag is needed.
- **Acks.** Every message is acked after the batch call returns (its events committed) and
  requeued if the pool process dies under it (``error_callback``: SIGKILL, the hard time
  limit), so a worker killed mid-batch loses nothing. The batch body refuses what is bad and
  hands back (re-sends) what it could not store; if it raises anyway, or returns nothing,
  its messages are requeued, never acked.
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
    flush_every = 100  # the most requests one pool call takes
    flush_interval = 0.02  # seconds: the longest a lone message waits for company

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._lent = 0  # prefetch slots lent to buffered messages
        self._consumer: Any = None

    def Strategy(self, task: Batches, app: Any, consumer: Any) -> Any:  # noqa: N802 (Celery's name)
        buffer_request = super().Strategy(task, app, consumer)
        self._consumer = consumer  # its qos is made after the strategies: read it when used

        def on_message(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **kw: Any) -> None:
            reason = problem(task, message)
            if reason is not None:
                raise InvalidTaskError(f"{task.name}: {reason}")
            buffer_request(message, body, ack, reject, callbacks, **kw)
            with self._lock:
                lend = self._lent < self.flush_every
                self._lent += lend
            if lend:
                self._consumer.qos.increment_eventually()

        return on_message

    def flush(self, requests: Any) -> Any:
        requests = list(requests)

        def settle(done: bool) -> None:
            for request in requests:
                if done:
                    request.acknowledge()
                else:  # the pool process died under the batch, or it raised: delivered again
                    request.reject(requeue=True)
            with self._lock:
                repaid = min(self._lent, len(requests))
                self._lent -= repaid
            if repaid:
                self._consumer.qos.decrement_eventually(repaid)
            if not self._buffer.empty():
                self._do_flush()

        return self._pool.apply_async(
            apply_batches_task, (self, ([SimpleRequest.from_request(r) for r in requests],), 0, None),
            callback=lambda result: _returned(settle, result),
            error_callback=lambda exc: _lost(settle, exc))


def _returned(settle: Any, result: Any) -> None:
    # celery-batches' trace catches an exception raised by the batch body, logs it and
    # returns None: nothing says what was committed, so nothing is acked (a message whose
    # event did commit comes back a duplicate).
    if result is None:
        log.warning("a batch raised; its messages are requeued")
    settle(result is not None)


def _lost(settle: Any, exc: Any) -> None:
    log.warning("a batch's pool process was lost (%s); its messages are requeued", exc)
    settle(False)
