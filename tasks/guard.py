"""Every message a worker takes is checked before Celery builds a request from it.

Celery 5.7 unpacks a task body as ``(args, kwargs, embed)`` in ``Request.__init__``, outside
the errors its consumer catches, and reads ``headers['id']`` and a task name that may not be
hashable the same way: one valid-JSON body that is not the triple (a string, a list of two,
an object), published to any queue, is an ``Unrecoverable error`` and the worker exits, again
on every restart (upstream: celery#7975, "Celery Getting Killed if message in queue is not
in proper format", and celery#4308 for undecodable bodies; both open).

Two supported extension points close that door:

- ``GuardedTask.Strategy`` (the app's ``task_cls``): before Celery's default strategy sees a
  message, ``problem()`` checks its size, headers, body shape and arguments against the
  task's signature; a bad one raises ``InvalidTaskError``, which the consumer handles.
- ``GuardedConsumer`` (``worker_consumer``): the consumer's handlers for invalid, unknown
  and undecodable messages record the rejection (origin ``queue:<name>``) and drop the
  message without the fragile lookups of the defaults; and any other error raised while one
  message is handled (a shape nobody foresaw) drops that message instead of the worker.

Dropping is safe: the store is written before any doorbell rings, and the sweep re-rings
an inbox whose doorbell was lost.
"""

from __future__ import annotations

import inspect
import logging
import types
from datetime import datetime, timezone
import typing
from collections.abc import Callable
from typing import Any

from celery import Task
from celery.exceptions import InvalidTaskError
from celery.utils.time import maybe_iso8601
from celery.worker.consumer import Consumer
from celery.worker.strategy import default as default_strategy
from kombu.exceptions import ContentDisallowed, DecodeError

from store.budget import WriteBudget
from store.validate import excerpt as bounded_excerpt
from tasks.application import runtime_settings

log = logging.getLogger("wakeful.guard")

# Largest task message body a worker accepts, in bytes. The store keeps payloads of at most
# 256 KiB as compact JSON; JSON escaping (\uXXXX) can double that on the wire, and 1 MiB
# leaves room for the rest of an ingest call.
MAX_MESSAGE_BYTES = 1024 * 1024
# Embedded signatures (callbacks, errbacks, chains, chords) make the worker send more tasks
# after this one: wakeful never uses them, so a message that carries one is refused.
_NO_EMBED = ("callbacks", "errbacks", "chain", "chord")
# Seconds ahead a message's eta may be. wakeful's own retries wait at most a minute; timers
# live in the database, never in the broker: a message held for hours sits in the worker's
# memory, unacked, and comes back after the visibility timeout (a flood of them is an
# out-of-memory attack).
MAX_ETA_SECONDS = 300
# Tasks whose arguments carry a credential: a refused message of theirs keeps no excerpt.
CARRY_CREDENTIALS = frozenset({"wakeful.answer_approval"})


def problem(task: Task, message: Any) -> str | None:
    """Why ``message`` cannot run as ``task``, or None when Celery may take it."""
    size = len(message.body or b"")
    if size > MAX_MESSAGE_BYTES:
        return f"message body is {size} bytes; the limit is {MAX_MESSAGE_BYTES}"
    headers = message.headers
    if not isinstance(headers, dict):
        return "message headers are not a mapping"
    try:
        payload = message.payload
    except (ContentDisallowed, DecodeError, ValueError, TypeError) as exc:
        return f"message body cannot be decoded: {type(exc).__name__}: {str(exc)[:200]}"
    if isinstance(payload, dict) and "task" in payload:  # protocol 1 (or a hybrid)
        args, kwargs, embed, fields = payload.get("args", []), payload.get("kwargs", {}), payload, payload
    elif isinstance(payload, (list, tuple)) and len(payload) == 3:  # protocol 2
        args, kwargs, embed = payload
        fields = headers
        if embed is None:
            embed = {}
    else:
        return (f"message body is not Celery's [args, kwargs, embed] triple "
                f"(got {_shape(payload)})")
    return (_header_problem(fields) or _embed_problem(embed)
            or _arguments_problem(task, args, kwargs))


def _shape(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}"
    names = {dict: "an object", str: "a string", type(None): "null", bool: "a boolean",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _header_problem(fields: dict[str, Any]) -> str | None:
    if not isinstance(fields.get("id"), str) or not fields["id"]:
        return "message has no task id"
    for name in ("shadow", "root_id", "parent_id", "group", "argsrepr", "kwargsrepr"):
        value = fields.get(name)
        if value is not None and not isinstance(value, str):
            return f"message header {name} must be a string"
    # Celery prints the id and the (shadow) name in its log lines, raw: an ANSI escape there
    # would run on the terminal of whoever reads the log.
    for name in ("id", "shadow", "root_id", "parent_id", "group"):
        value = fields.get(name)
        if value is not None and (len(value) > 255 or not value.isprintable()):
            return f"message header {name} must be printable text of at most 255 characters"
    retries = fields.get("retries", 0)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        return "message header retries must be a non-negative integer"
    limits = fields.get("timelimit")
    if limits is not None and not (
            isinstance(limits, (list, tuple)) and len(limits) == 2
            and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in limits)):
        return "message header timelimit must be [hard, soft] seconds"
    if fields.get("ignore_result") not in (None, True, False):
        return "message header ignore_result must be a boolean"
    return _eta_problem(fields.get("eta"))


def _eta_problem(eta: Any) -> str | None:
    if eta is None:
        return None
    try:
        when = maybe_iso8601(eta)
    except (AttributeError, TypeError, ValueError):
        return "message header eta is not an ISO 8601 time"
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    if (when - datetime.now(timezone.utc)).total_seconds() > MAX_ETA_SECONDS:
        return (f"message eta is more than {MAX_ETA_SECONDS} s ahead: wakeful keeps timers in "
                "the database, never in the broker")
    return None


def _embed_problem(embed: Any) -> str | None:
    if not isinstance(embed, dict):
        return "the third element of the body (embed) must be an object or null"
    carried = [name for name in _NO_EMBED if embed.get(name)]
    if carried:
        return f"message carries {', '.join(carried)}: wakeful tasks take none"
    return None


def _arguments_problem(task: Task, args: Any, kwargs: Any) -> str | None:
    if not isinstance(args, (list, tuple)):
        return f"task args must be a list, got {_shape(args)}"
    if not isinstance(kwargs, dict):
        return f"task kwargs must be an object, got {_shape(kwargs)}"
    signature, hints = _signature(task)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        return f"arguments do not fit {task.name}{signature}: {exc}"
    for name, value in bound.arguments.items():
        expected = hints.get(name)
        if expected is not None and not isinstance(value, expected):
            return (f"argument {name} of {task.name} must be "
                    f"{' or '.join(_type_name(t) for t in expected)}, got {type(value).__name__}")
    return None


_signatures: dict[str, tuple[inspect.Signature, dict[str, tuple[type, ...]]]] = {}


def _signature(task: Task) -> tuple[inspect.Signature, dict[str, tuple[type, ...]]]:
    """The task's signature and, per parameter annotated with plain types (``str``,
    ``int | None``), the types a value may have. ``Any`` and the like are not checked here:
    the task checks those itself."""
    if task.name not in _signatures:
        # A batch task's run() takes the list of requests; what one message carries is
        # declared as ``accepts`` (tasks/batches.py).
        accepts = getattr(task, "accepts", None) or task.run
        signature = inspect.signature(accepts)
        try:
            annotations = typing.get_type_hints(accepts)
        except Exception:  # noqa: BLE001 - an annotation we cannot resolve is not checked
            annotations = {}
        hints = {}
        for name in signature.parameters:
            allowed = _plain_types(annotations.get(name))
            if allowed:
                hints[name] = allowed
        _signatures[task.name] = (signature, hints)
    return _signatures[task.name]


def _plain_types(annotation: Any) -> tuple[type, ...] | None:
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    options = typing.get_args(annotation) if union else (annotation,)
    plain = tuple(type(None) if t is None else t for t in options)
    return plain if plain and all(t in _PLAIN for t in plain) else None


_PLAIN = (str, int, float, bool, dict, list, type(None))


def _type_name(t: type) -> str:
    return "null" if t is type(None) else t.__name__


def strategy(task: Task, app: Any, consumer: Any, **kwargs: Any) -> Callable[..., Any]:
    """Celery's default strategy behind ``problem()``: a bad message never reaches it."""
    handle = default_strategy(task, app, consumer, **kwargs)

    def guarded(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **kw: Any) -> Any:
        reason = problem(task, message)
        if reason is not None:
            raise InvalidTaskError(f"{task.name}: {reason}")
        return handle(message, body, ack, reject, callbacks, **kw)

    return guarded


class GuardedTask(Task):
    Strategy = "tasks.guard:strategy"


# -- what the consumer does with a refused message --------------------------------------

class GuardedConsumer(Consumer):
    """Celery's consumer whose handlers for bad messages record and drop them."""

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        handle = super().create_task_handler(*args, **kwargs)
        recoverable = tuple(self.connection_errors) + tuple(self.channel_errors)

        def on_task_received(message: Any) -> Any:
            try:
                return handle(message)
            except recoverable:
                raise  # the broker connection: the consumer reconnects
            except Exception as exc:  # noqa: BLE001 - one bad message must not stop the worker
                log.error("a message broke the task handler (%s); dropped", type(exc).__name__,
                          exc_info=True)
                try:
                    refuse(message, f"message could not be handled: {type(exc).__name__}: {exc}",
                           self.connection_errors)
                except recoverable:
                    raise
                except Exception:  # noqa: BLE001 - not even the refusal: log it, keep consuming
                    log.exception("could not refuse a message")
                return None

        return on_task_received

    def on_unknown_message(self, body: Any, message: Any) -> None:
        refuse(message, "not a Celery task message (no task name)", self.connection_errors)

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        # Celery's own handler also writes a failure result for the message's id (a flood of
        # those fills Redis) and reads headers a forged message may lack: neither here.
        name = message.headers.get("task") if isinstance(message.headers, dict) else None
        refuse(message, f"unknown task name {_text(name)}", self.connection_errors)

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        refuse(message, str(exc), self.connection_errors)

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        refuse(message, f"message body cannot be decoded: {type(exc).__name__}: {str(exc)[:200]}",
               self.connection_errors)


def refuse(message: Any, reason: str, connection_errors: Any) -> None:
    """Drop the message (acked, never requeued) and record why, where an operator looks."""
    queue = queue_of(message)
    if not message.acknowledged:
        message.reject_log_error(log, connection_errors)
    record(queue, reason, message)
    log.warning("refused a message on queue %s: %s", _text(queue), _text(reason, 400))


def queue_of(message: Any) -> str:
    info = getattr(message, "delivery_info", None) or {}
    return str(info.get("routing_key") or info.get("exchange") or "unknown")


def _text(value: Any, limit: int = 200) -> str:
    # Log lines are read on terminals: repr() escapes control characters.
    return repr(value)[:limit]


# WAKEFUL_REJECTIONS_PER_SECOND refusals a worker are written (store/budget.py); beyond it a
# refusal is dropped, logged and counted in ``unrecorded``. Made at the first refusal, from
# the settings the app was configured with.
_budget: WriteBudget | None = None
unrecorded = 0


def record(queue: str, reason: str, message: Any) -> None:
    global unrecorded, _budget
    if _budget is None:
        _budget = WriteBudget(runtime_settings().rejections_per_second)
    if not _budget.take():
        unrecorded += 1
        return
    inbox = None
    try:
        payload = message.payload
        if isinstance(payload, (list, tuple)) and len(payload) == 3 and isinstance(payload[1], dict):
            inbox = payload[1].get("inbox")
    except Exception:  # noqa: BLE001 - undecodable: no inbox to name
        pass
    headers = message.headers if isinstance(message.headers, dict) else {}
    body = message.body
    if str(headers.get("task")) in CARRY_CREDENTIALS:
        body = None  # an approval answer's body carries its token: never kept
    elif isinstance(body, (bytes, bytearray)):
        body = bytes(body[:2000])
    try:
        from tasks.runtime import get_store

        get_store().operator.record_rejection(
            f"queue:{queue}", reason, inbox=inbox if isinstance(inbox, str) else None,
            excerpt=None if body is None else bounded_excerpt(body))
    except Exception as exc:  # noqa: BLE001 - the store down: the log line is the record
        unrecorded += 1
        log.error("could not record the refusal of a message on %s: %s", _text(queue), type(exc).__name__)
