"""A task that takes its messages in batches: one pool call for every message waiting.

Celery runs one task call per message: the worker's main process receives it, hands it to a
pool process and acks it. A ``BatchTask`` has its own strategy (the hook Celery gives a task
class for exactly this) that keeps each message in a buffer in the main process instead, and
hands the pool one call, ``run(items)``, with the buffered messages as ``BatchItem``s. Written
here rather than taken from celery-batches: its latest release (0.11) declares ``celery<5.7``,
and installing it moves Celery back to 5.6, while wakeful is verified on 5.7.

- **The guard first.** ``problem()`` (tasks/guard.py) checks every message before it is
  buffered, against the per-message signature the task declares as ``accepts``; a bad one
  raises ``InvalidTaskError`` and the consumer records and drops it alone, as for any task.
- **Flush** at once when no batch is in flight (an idle worker: a lone message does not wait,
  the latency path); otherwise when a batch returns with messages waiting, at ``flush_every``
  messages, or ``flush_seconds`` (20 ms) after the first one waiting if a pool process is
  free (else when one returns). Not whenever a pool process is free: under load the main
  process, which receives and acks every message, is the bottleneck, so a pool process is
  nearly always free and batches would be of one; and not on a fixed tick alone, which would
  add the tick to every unloaded wake.
- **Prefetch lent while buffering.** With late acks a buffered message counts against the
  worker's prefetch limit (1 x concurrency here), which would cap a batch at the pool's size.
  As Celery does for a message with an ETA, each buffered message raises the limit by one
  until it is acked, up to ``flush_every``: the runs worker's prefetch of 1 is not touched.
- **ETA.** A message with a future ``eta`` (a batch handed back with a countdown) joins the
  buffer when it is due; ``expires`` and revocations are not looked at.
- **Acks.** Every message is acked after the batch call returned (its events committed) and
  requeued if its pool process died (SIGKILL, the hard time limit), so a worker killed
  mid-batch loses nothing.
- **A batch that raises** is run again one message at a time, so a message that makes it
  raise holds up only itself: the rest are acked as their calls return. A message whose call
  raises alone goes to the task's ``failed(item, exc)``, which settles it (sent back for later,
  or recorded and dropped at a cap: ``tasks/ingest.py``) or leaves it to be requeued (the
  default). Requeued at once, a message that always raises would come back forever.
- **Task events** (Flower): Celery sends none for a message its default strategy does not
  handle, so the batcher sends them itself, per message: ``task-received`` as it is
  buffered, ``task-started`` as its batch goes to the pool, then ``task-succeeded`` with the
  batch's return value (the batch's summary), ``task-failed`` when its call raised alone and
  ``failed()`` settled it, or ``task-retried`` when it is requeued. Not for a message without
  arguments: that is one of beat's ticks, which Flower never lists (tasks/celeryconfig.py,
  ``HOUSEKEEPING``); nor when the task's ``send_events`` is off.
- **Without an event loop** (the embedded broker's polling transport, where Celery applies a
  changed prefetch only between polls of up to 2 s) every message is its own batch, flushed at
  once and lent nothing, as for any task. Batches are for Redis.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from celery import Task, states
from celery.exceptions import InvalidTaskError
from celery.utils.saferepr import saferepr
from celery.utils.time import maybe_iso8601

from wakeful import telemetry
from tasks.guard import problem

log = logging.getLogger("wakeful.batches")


@dataclass
class BatchItem:
    """One message of a batch, as the pool process sees it (picklable)."""

    id: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    ignore_result: bool
    headers: dict[str, Any] = field(default_factory=dict)
    chord: Any = None  # Celery's result backend reads it after storing a result
    # Where the rpc:// result backend (RabbitMQ's default) sends a result the caller asked for.
    reply_to: str | None = None
    correlation_id: str | None = None


@dataclass(frozen=True)
class Settled:
    """What became of one message of a batch, sent back from the pool process: acked (else
    requeued), with the batch's return value shown, or the error of its call alone."""

    acked: bool
    result: str | None = None
    error: str | None = None


class BatchTask(Task):
    """Base class: ``run(items: list[BatchItem])``; ``accepts`` is one message's signature."""

    abstract = True
    flush_every = 100
    flush_seconds = 0.02
    # Celery's apply_async checks a call's arguments against run(), which takes the batch:
    # the beat's tick of a batch task failed that check. One message's arguments are checked
    # against ``accepts`` by the guard, where the worker receives it.
    typing = False

    def failed(self, item: BatchItem, exc: Exception) -> bool:
        """A message whose call raised on its own: True if this settled it (acked), False to
        requeue it. Requeued at once, a message that always raises comes back forever:
        override with something bounded."""
        return False

    def Strategy(self, task: Any, app: Any, consumer: Any) -> Any:  # noqa: N802 (Celery's name)
        return _Batcher(task, consumer).on_message


def batch_span(name: str, items: list[BatchItem]) -> Any:
    """The span of a batch call (Celery makes none per message for a batch task): it continues
    the first message's trace and links the others' (docs/operating.md "Traces")."""
    return telemetry.span(name, kind=telemetry.CONSUMER, parent=items[0].headers if items else None,
                          links=[item.headers for item in items[1:]],
                          attributes={"messaging.batch.message_count": len(items)})


def run_batch(name: str, items: list[BatchItem]) -> list[Settled]:
    """In the pool process: the task's ``run`` on the batch. Per message, what became of it."""
    from celery import current_app

    task = current_app.tasks[name]
    try:
        shown = saferepr(task.run(items), task.resultrepr_maxsize)
        return [Settled(True, result=shown)] * len(items)
    except Exception:  # noqa: BLE001 - find the message that raised, below; say why here
        log.exception("batch of %d %s messages raised; running them one at a time", len(items), name)
    return [_alone(task, item) for item in items]


def _alone(task: Any, item: BatchItem) -> Settled:
    try:
        return Settled(True, result=saferepr(task.run([item]), task.resultrepr_maxsize))
    except Exception as exc:  # noqa: BLE001 - the task's failed() decides; nothing is lost
        log.exception("%s message %s raised on its own", task.name, item.id)
        error = saferepr(exc, task.resultrepr_maxsize)
        try:
            return Settled(bool(task.failed(item, exc)), error=error)
        except Exception:  # noqa: BLE001
            log.exception("%s message %s: failed() raised too; it is requeued", task.name, item.id)
            return Settled(False, error=error)


def mark_done(backend: Any, done: list[tuple[BatchItem, Any]]) -> None:
    """Each message's result stored as a success, as ``backend.mark_as_done`` does one message
    at a time. On Celery's Redis backend that is two round trips per message (a GET so that a
    success already stored is kept, then SET and PUBLISH): for a batch here, two in all (one
    MGET, one pipeline). Celery has no call for many results, so this one follows its Redis
    backend's own steps; anything else (another backend, a chord, a Redis error) goes the
    one-at-a-time way, with Celery's retries."""
    # Looked up, not imported: importing redis loads its OpenTelemetry instruments, and a
    # process whose backend is not Redis has no reason to.
    redis_backend = sys.modules.get("celery.backends.redis")
    if (len(done) > 1 and redis_backend is not None and isinstance(backend, redis_backend.RedisBackend)
            and not any(item.chord for item, _ in done)):
        try:
            _mark_done_pipelined(backend, done)
            return
        except Exception as exc:  # noqa: BLE001 - stored one at a time below, with Celery's retries
            log.warning("results of a batch not stored at once (%s: %s); one at a time",
                        type(exc).__name__, exc)
    for item, result in done:
        backend.mark_as_done(item.id, result, request=item)


def _mark_done_pipelined(backend: Any, done: list[tuple[BatchItem, Any]]) -> None:
    keys = [backend.get_key_for_task(item.id) for item, _ in done]
    stored = backend.mget(keys)
    with backend.client.pipeline() as pipe:
        for key, (item, result), before in zip(keys, done, stored):
            if before is not None and backend.decode_result(before)["status"] == states.SUCCESS:
                continue  # as Celery does: a success already stored is never overwritten
            meta = backend._get_result_meta(result=result, state=states.SUCCESS, traceback=None, request=item)
            meta["task_id"] = item.id
            value = backend.encode(meta)
            pipe.set(key, value, ex=backend.expires or None)
            pipe.publish(key, value)
        pipe.execute()


class _Batcher:
    def __init__(self, task: Any, consumer: Any) -> None:
        self.task = task
        self.consumer = consumer  # its qos and pool are made after the strategies: read them when used
        self.batching = consumer.hub is not None
        self.lock = threading.Lock()
        self.buffer: list[tuple[BatchItem, Any, bool]] = []  # (item, message, lent a slot)
        self.lent = 0
        self.in_flight = 0  # batches handed to the pool and not yet settled
        self.tick: Any = None  # the pending flush timer

    def on_message(self, message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **kw: Any) -> None:
        reason = problem(self.task, message)
        if reason is not None:
            raise InvalidTaskError(f"{self.task.name}: {reason}")
        item, due = _item(message)
        self._report("task-received", item, name=self.task.name, **_as_received(item))
        lend = self.batching and self._lend()
        if due > time.time():  # handed back with a countdown: buffered when due
            self.consumer.qos.increment_eventually()
            self.consumer.timer.call_after(due - time.time(), self._add, (item, message, lend, True))
            return
        self._add(item, message, lend, False)

    def _lend(self) -> bool:
        with self.lock:
            lend = self.lent < self.task.flush_every
            self.lent += lend
        if lend:
            self.consumer.qos.increment_eventually()
        return lend

    def _add(self, item: BatchItem, message: Any, lend: bool, was_eta: bool) -> None:
        if was_eta:
            self.consumer.qos.decrement_eventually()
        with self.lock:
            self.buffer.append((item, message, lend))
            # Nothing in flight: an idle worker, so this message goes at once (the latency
            # path). Otherwise it waits for company until a batch returns or the tick.
            now = len(self.buffer) >= self.task.flush_every or self.in_flight == 0
            start_tick = self.tick is None and not now
            if start_tick:
                self.tick = True  # claimed: set to the timer below
        if now or not self.batching:
            self.flush()
        elif start_tick:
            self.tick = self.consumer.timer.call_after(self.task.flush_seconds, self._on_tick)

    def _on_tick(self) -> None:
        """``flush_seconds`` after a message began to wait: flush, unless every pool process
        is busy with a batch. Then the buffer waits for one to return and goes as one batch,
        rather than as small batches queued behind the busy processes (a loaded machine whose
        consumer receives a message every 20 ms or more made batches of one that way)."""
        with self.lock:
            busy = self.in_flight >= (getattr(self.consumer.pool, "limit", None) or 1)
            if busy:
                self.tick = None  # the returning batch flushes the buffer (``_settle``)
        if not busy:
            self.flush()

    def flush(self) -> None:
        with self.lock:
            batch, self.buffer = self.buffer[:self.task.flush_every], self.buffer[self.task.flush_every:]
            tick, self.tick = self.tick, None
        if tick not in (None, True):
            tick.cancel()
        if not batch:
            return
        with self.lock:
            self.in_flight += 1
        for item, _, _ in batch:
            self._report("task-started", item)
        began = time.monotonic()
        self.consumer.pool.apply_async(
            run_batch, (self.task.name, [item for item, _, _ in batch]),
            callback=lambda settled: self._settle(batch, settled, began),
            error_callback=lambda exc: self._lost(batch, exc, began))

    def _lost(self, batch: list[Any], exc: Any, began: float) -> None:
        log.warning("a batch's pool process was lost (%s); its messages are requeued", exc)
        lost = Settled(False, error=f"its pool process was lost: {exc!r}")
        self._settle(batch, [lost] * len(batch), began)

    def _settle(self, batch: list[Any], settled: Any, began: float) -> None:
        if (not isinstance(settled, list) or len(settled) != len(batch)
                or not all(isinstance(s, Settled) for s in settled)):  # never leave one unsettled
            settled = [Settled(False, error="the batch's call returned no outcome per message")] * len(batch)
        errors = self.consumer.connection_errors
        runtime = time.monotonic() - began
        for (item, message, _), done in zip(batch, settled):
            if not done.acked:
                message.reject_log_error(log, errors, requeue=True)
                self._report("task-retried", item, exception=done.error, traceback=None)
                continue
            message.ack_log_error(log, errors)
            if done.error is not None:  # its call raised alone; failed() settled it
                self._report("task-failed", item, exception=done.error, traceback=None)
            else:
                self._report("task-succeeded", item, result=done.result, runtime=runtime)
        repaid = sum(1 for _, _, lent in batch if lent)
        if repaid:
            with self.lock:
                self.lent -= repaid
            self.consumer.qos.decrement_eventually(repaid)
        with self.lock:
            self.in_flight -= 1
            waiting = bool(self.buffer)
        if waiting:
            self.flush()

    def _report(self, kind: str, item: BatchItem, **fields: Any) -> None:
        """A task event for this message, as the worker sends one for any task's (Flower
        lists them); none for one of beat's ticks, which names nothing to look at."""
        dispatcher = getattr(self.consumer, "event_dispatcher", None)
        if (dispatcher is None or not dispatcher.enabled or not self.task.send_events
                or not (item.args or item.kwargs)):
            return
        try:
            dispatcher.send(kind, uuid=item.id, **fields)
        except Exception as exc:  # noqa: BLE001 - monitoring never costs a message
            log.warning("%s event for %s not sent (%s: %s)", kind, item.id, type(exc).__name__, exc)


def _as_received(item: BatchItem) -> dict[str, Any]:
    """The fields of the ``task-received`` event Celery sends for a message. Its arguments as
    Celery shows them: the sender's ``argsrepr``/``kwargsrepr`` (a sender may mask what it
    passes), else their repr, cut as Celery cuts them."""
    headers = item.headers
    fields: dict[str, Any] = {name: value if isinstance(value, str) else None
                              for name in ("root_id", "parent_id", "eta", "expires")
                              for value in [headers.get(name)]}
    fields["retries"] = headers.get("retries") if isinstance(headers.get("retries"), int) else 0
    for name, value in (("args", item.args), ("kwargs", item.kwargs)):
        given = headers.get(f"{name}repr")
        fields[name] = given if isinstance(given, str) else saferepr(value, 1024)
    return fields


def _item(message: Any) -> tuple[BatchItem, float]:
    """The message as a BatchItem, and when it is due (epoch seconds). The guard has checked
    its shape: protocol 2 (args, kwargs, embed) with the id in its headers, or protocol 1."""
    payload, headers = message.payload, dict(message.headers or {})
    if isinstance(payload, dict):  # protocol 1
        args, kwargs, fields = payload.get("args") or (), payload.get("kwargs") or {}, payload
    else:
        args, kwargs, _ = payload
        fields = headers
    eta = maybe_iso8601(fields.get("eta")) if fields.get("eta") else None
    properties = message.properties or {}
    item = BatchItem(id=fields.get("id"), args=tuple(args), kwargs=dict(kwargs),
                     ignore_result=bool(fields.get("ignore_result", False)), headers=headers,
                     reply_to=properties.get("reply_to"), correlation_id=properties.get("correlation_id"))
    return item, (eta.timestamp() if eta is not None else 0.0)
