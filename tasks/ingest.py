"""``wakeful.ingest``: how other services put an event into an inbox by task call.

Callers need nothing from wakeful: ``Celery(broker=...).send_task("wakeful.ingest",
kwargs={"inbox": ..., "source": ..., "source_id": ..., "payload": {...}})`` lands on the
default queue. Invalid input is never lost in a worker log: it is recorded in the store's
rejected-input table and the result says why.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy.exc import DBAPIError

from store import InvalidEvent

from tasks.application import app
from tasks.doorbell import ring
from tasks.runtime import get_store

log = logging.getLogger("wakeful.ingest")

EXCERPT_CHARS = 1000

# The message is the only copy of the event until it is stored: a database outage is
# retried (short, growing countdowns; timers never ride on eta) instead of dropping it.
_DB_RETRY = {"autoretry_for": (DBAPIError,), "retry_backoff": 1, "retry_backoff_max": 60,
             "retry_jitter": True, "max_retries": 12}


@app.task(name="wakeful.ingest", **_DB_RETRY)
def ingest(inbox: Any = None, source: Any = None, source_id: Any = None, payload: Any = None,
           *unexpected_args: Any, **unexpected: Any) -> dict[str, Any]:
    """Store an event once; a new one rings its inbox's doorbell.

    Returns ``{"stored": True}``, ``{"stored": False, "duplicate": True}``, or
    ``{"stored": False, "rejected": "<why>"}``.
    """
    store = get_store()
    try:
        if unexpected_args or unexpected:
            extra = sorted(unexpected) or [f"{len(unexpected_args)} extra positional argument(s)"]
            raise InvalidEvent("unexpected arguments: " + ", ".join(extra)
                               + " (expected inbox, source, source_id, payload)")
        stored = store.ingest(inbox, source, source_id, payload)
    except InvalidEvent as exc:
        reason = str(exc)
        store.record_rejection("task:wakeful.ingest", reason, inbox=inbox, source=source,
                               source_id=source_id, excerpt=_excerpt(payload, unexpected))
        log.warning("ingest rejected: %s (inbox=%r source=%r source_id=%r)", reason,
                    _short(inbox), _short(source), _short(source_id))
        return {"stored": False, "rejected": reason}
    if stored:
        ring(inbox)
        return {"stored": True}
    return {"stored": False, "duplicate": True}


def _excerpt(payload: Any, unexpected: dict[str, Any]) -> str:
    value = payload if not unexpected else {"payload": payload, "unexpected": unexpected}
    try:
        text = json.dumps(value, default=repr, ensure_ascii=True)
    except (ValueError, TypeError, RecursionError):
        text = repr(value)[:EXCERPT_CHARS * 2]
    return text[:EXCERPT_CHARS]


def _short(value: Any) -> str:
    return repr(value)[:80]
