"""``wakeful.answer_approval``: a human's answer to a deferred action."""

from __future__ import annotations

import logging
from typing import Any

from store import InvalidEvent

from tasks.application import app
from tasks.doorbell import ring
from tasks.runtime import get_store

log = logging.getLogger("wakeful.approvals")


@app.task(name="wakeful.answer_approval")
def answer_approval(inbox: Any = None, request_id: Any = None, answer: Any = None) -> dict[str, Any]:
    """Store the answer unless the deadline passed; returns the outcome that stands.

    ``{"outcome": "yes" | "no" | "expired" | "unknown"}``; the inbox's doorbell rings whenever
    an answer (or the expiry) stands, so the agent resumes with it.
    """
    store = get_store()
    try:
        outcome = store.answer_approval(inbox, request_id, answer)
    except (InvalidEvent, ValueError, TypeError) as exc:
        store.record_rejection("task:wakeful.answer_approval", str(exc), inbox=inbox,
                               source="approval", source_id=request_id, excerpt=repr(answer))
        log.warning("approval answer rejected: %s", exc)
        return {"outcome": None, "rejected": str(exc)}
    if outcome != "unknown":
        ring(inbox)
    return {"outcome": outcome}
