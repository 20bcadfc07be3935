"""``wakeful.sweep``: every inbox with claimable work and no live lease gets a doorbell.

This is what makes the broker only a doorbell: a ring lost with a Redis restart, a worker
killed with its message, a ring that arrived while another worker held the lease and then
died, an event whose backoff just ended: the next sweep rings it. A ring too many costs one
failed ``acquire``.
"""

from __future__ import annotations

from typing import Any

from tasks.application import app
from tasks.doorbell import ring_many
from tasks.runtime import get_store
from tasks.application import runtime_settings


@app.task(name="wakeful.sweep")
def sweep() -> dict[str, Any]:
    inboxes = get_store().runs.sweep_candidates()
    # Each ring expires when the next sweep is due: a later sweep rings again if still needed,
    # but not while this one is queued unstarted (tasks/doorbell.py, SWEPT_PREFIX).
    # Its rings stand for lost doorbells, so each task drains the backlog from the database
    # once its inbox is idle: a flushed broker's backlog does not wait for sweep after sweep.
    return {"inboxes_rung": ring_many(inboxes, expires=max(runtime_settings().sweep_interval, 1.0), drain=True)}
