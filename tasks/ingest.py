"""``wakeful.ingest``: how other services put an event into an inbox by task call.

Callers need nothing from wakeful: ``Celery(broker=...).send_task("wakeful.ingest",
kwargs={"inbox": ..., "source": ..., "source_id": ..., "payload": {...}})`` lands on the
default queue. Invalid input is never lost in a worker log: it is recorded in the store's
rejected-input table, and a caller that asked for a result (``ignore_result=False``) gets
``{"stored": True}``, ``{"stored": False, "duplicate": True}`` or ``{"stored": False,
"rejected": "<why>"}``.

The worker takes these messages in batches (tasks/batches.py: up to 100, none waiting more
than 20 ms): a batch goes into one ``store.intake.ingest_many`` (one transaction) and one coalesced
doorbell for the inboxes with a new event. Each message is acked once its event is committed. A bad message
is refused alone: the others in its batch are stored. A database that cannot be reached is
tried again a few times, then the batch's messages are sent again with a countdown (as
Celery's own retry would), so an outage never loses an event. A message on which the task
raises anything else (a bug, a result backend that refuses) is sent back with a countdown
too, counted apart; the fourth time it is recorded as rejected, with the error, and dropped:
it cannot hold a worker in a loop.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from typing import Any

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from wakeful import telemetry
from store import InvalidEvent

from tasks.application import app
from tasks.batches import BatchTask, batch_span, mark_done
from tasks.doorbell import ring_many
from tasks.runtime import get_store

log = logging.getLogger("wakeful.ingest")

EXCERPT_CHARS = 1000
# A database that cannot be reached: tried again after these pauses (seconds) within the
# batch, then the messages go back to the broker for later (the countdown, growing with
# each hand-back up to the last value). Timers never ride on an eta: this is only minutes.
_PAUSES = (0.2, 1.0, 3.0)
_COUNTDOWNS = (5, 15, 60)
_HANDED_BACK = "wakeful_ingest_handed_back"  # header: how often a message was sent back
_FAILURES = "wakeful_ingest_failures"  # header: how often the task raised on it alone
# The database went away (a dropped connection can also surface as InterfaceError): the
# messages are kept, never refused for it.
_OUTAGE = (OperationalError, InterfaceError)


def accepts(inbox: Any = None, source: Any = None, source_id: Any = None, payload: Any = None,
            *unexpected_args: Any, **unexpected: Any) -> None:
    """What one ``wakeful.ingest`` message carries (the guard checks messages against it)."""


def failed(item: Any, exc: Exception) -> bool:
    """tasks/batches.py: the task raised on this message alone. Sent back with a countdown,
    up to ``len(_COUNTDOWNS)`` times; then recorded as rejected and dropped (acked). False
    (requeue) only if neither could be done."""
    failures = int(item.headers.get(_FAILURES) or 0) + 1
    reason = f"the ingest task raised on this message {failures} times: {type(exc).__name__}: {exc}"
    if failures <= len(_COUNTDOWNS):
        _hand_back([item], exc, failures=failures)
        return True
    fields, _ = _fields(item.args, item.kwargs)
    _refuse(get_store(), reason[:500], fields)
    if not item.ignore_result:
        app.backend.mark_as_done(item.id, {"stored": False, "rejected": reason[:500]}, request=item)
    return True


@app.task(name="wakeful.ingest", base=BatchTask, accepts=staticmethod(accepts), failed=staticmethod(failed))
def ingest(requests: list[Any]) -> dict[str, int]:
    """Store a batch of events once each; new ones ring their inboxes' doorbells."""
    with batch_span("wakeful.ingest", requests):
        return _ingest(requests)


def _ingest(requests: list[Any]) -> dict[str, int]:
    store = get_store()
    results: dict[int, dict[str, Any]] = {}
    items: list[tuple[int, tuple[Any, ...]]] = []
    try:
        for n, request in enumerate(requests):
            fields, reason = _fields(request.args, request.kwargs)
            if reason is not None:
                results[n] = _refuse(store, reason, fields)
            else:
                items.append((n, tuple(fields[k] for k in _KEYS)))
        stored = _store(store, items, results)
    except _OUTAGE as exc:
        # Everything not yet settled goes back (a refusal already recorded is settled; an
        # event that did commit comes back a duplicate and rings nothing: the sweep rings).
        unsettled = [request for n, request in enumerate(requests) if n not in results]
        _hand_back(unsettled, exc)
        return {"messages": len(requests), "handed_back": len(unsettled)}
    ring_many(item[0] for (_, item), new in zip(items, stored) if new)
    for (n, _), new in zip(items, stored):
        results.setdefault(n, {"stored": True} if new else {"stored": False, "duplicate": True})
    mark_done(app.backend, [(request, results[n]) for n, request in enumerate(requests) if not request.ignore_result])
    summary = {"messages": len(requests), "stored": sum(stored),
               "refused": sum("rejected" in r for r in results.values())}
    log.info("ingest batch: %s", summary)
    telemetry.annotate(**{f"wakeful.ingest.{k}": v for k, v in summary.items()})
    return summary


_KEYS = ("inbox", "source", "source_id", "payload")
_ACCEPTS = inspect.signature(accepts)


def _fields(args: Any, kwargs: Any) -> tuple[dict[str, Any], str | None]:
    """The message's inbox, source, source_id and payload (None where missing), and why it
    cannot be stored as it is (unexpected arguments), or None."""
    bound = _ACCEPTS.bind(*args, **kwargs)  # the guard checked that they fit
    fields = {k: bound.arguments.get(k) for k in _KEYS}
    extra_args, extra = bound.arguments.get("unexpected_args", ()), bound.arguments.get("unexpected", {})
    if not (extra_args or extra):
        return fields, None
    names = sorted(extra) or [f"{len(extra_args)} extra positional argument(s)"]
    fields["unexpected"] = extra
    return fields, "unexpected arguments: " + ", ".join(names) + " (expected inbox, source, source_id, payload)"


def _store(store: Any, items: list[tuple[int, tuple[Any, ...]]], results: dict[int, dict[str, Any]]) -> list[bool]:
    """Stored (True) or a duplicate (False), per item: one ``ingest_many`` for the lot, or,
    when the store refuses any of them, one call per item, so only the bad ones are refused
    (recorded in ``results``). A database that cannot be reached raises one of ``_OUTAGE``."""
    try:
        return _with_pauses(lambda: store.intake.ingest_many([item for _, item in items]))
    except InvalidEvent:
        pass
    except DBAPIError as exc:
        if isinstance(exc, _OUTAGE):
            raise
    stored = []
    for n, item in items:
        try:
            stored.append(_with_pauses(lambda: store.ingest(*item)))
            continue
        except InvalidEvent as exc:
            reason = str(exc)
        except DBAPIError as exc:
            if isinstance(exc, _OUTAGE):
                raise
            reason = f"the database refused it: {type(exc.orig).__name__}: {str(exc.orig)[:200]}"
        results[n] = _refuse(store, reason, dict(zip(_KEYS, item)))
        stored.append(False)
    return stored


def _with_pauses(call: Any) -> Any:
    for pause in _PAUSES:
        try:
            return call()
        except _OUTAGE as exc:  # the database went away: wait a little, try again
            log.warning("ingest: the database is not answering (%s); again in %.1f s", exc.orig, pause)
            time.sleep(pause)
    return call()


def _hand_back(requests: list[Any], exc: Exception, failures: int | None = None) -> None:
    """Send these messages again with a countdown, so they are acked here without being lost
    (each goes back to the queue as itself): the database stayed away, or (``failures``) the
    task raised on the message for the n-th time."""
    for request in requests:
        times = int(request.headers.get(_HANDED_BACK) or 0)
        headers = {_HANDED_BACK: times, _FAILURES: int(request.headers.get(_FAILURES) or 0)}
        if failures is None:
            headers[_HANDED_BACK] = times + 1
        else:
            headers[_FAILURES] = failures
        countdown = _COUNTDOWNS[min((failures or headers[_HANDED_BACK]) - 1, len(_COUNTDOWNS) - 1)]
        app.send_task("wakeful.ingest", args=request.args, kwargs=request.kwargs, task_id=request.id,
                      countdown=countdown, headers=headers, ignore_result=request.ignore_result)
    log.warning("ingest: %d messages sent back for later (%s: %s)", len(requests), type(exc).__name__, exc)


def _refuse(store: Any, reason: str, fields: dict[str, Any]) -> dict[str, Any]:
    inbox, source, source_id = fields.get("inbox"), fields.get("source"), fields.get("source_id")
    unexpected = fields.get("unexpected") or {}
    store.operator.record_rejection("task:wakeful.ingest", reason, inbox=inbox, source=source,
                                    source_id=source_id, excerpt=_excerpt(fields.get("payload"), unexpected))
    log.warning("ingest rejected: %s (inbox=%r source=%r source_id=%r)", reason,
                _short(inbox), _short(source), _short(source_id))
    return {"stored": False, "rejected": reason}


def _excerpt(payload: Any, unexpected: dict[str, Any]) -> str:
    value = payload if not unexpected else {"payload": payload, "unexpected": unexpected}
    try:
        text = json.dumps(value, default=repr, ensure_ascii=True)
    except (ValueError, TypeError, RecursionError):
        text = repr(value)[:EXCERPT_CHARS * 2]
    return text[:EXCERPT_CHARS]


def _short(value: Any) -> str:
    return repr(value)[:80]
