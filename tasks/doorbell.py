"""The doorbell: a Celery message that only says "look at inbox X".

Ringing never raises. The event is already stored when we ring; if the broker is down the
ring is lost and the sweep (``wakeful.sweep``) rings again for every inbox with work and no
live lease. So a broker error is logged, not handed to the caller (a webhook must still get
its fast 2xx once the event is stored).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tasks.application import app
from tasks.celeryconfig import OUTBOX_QUEUE, RUNS_QUEUE

log = logging.getLogger("wakeful.doorbell")

# A broker blip is retried briefly; a broker outage is left to the sweep. ignore_result=True
# on every ring: otherwise send_task subscribes to the result backend first, and with Redis
# down that alone retried for 20 s (measured) before the ring could fail.
_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}


def ring(inbox: str, expires: float | None = None, drain: bool = False) -> None:
    """Ask a worker to run ``inbox``. Never raises; the sweep covers a lost ring.

    ``expires`` (seconds): a ring still queued after that long is dropped unrun. The sweep
    uses it, so its rings for inboxes stuck behind busy workers never pile up beyond one
    sweep's worth: the next sweep rings again if the work is still there.

    ``drain``: once ``inbox`` is idle, the task goes on with the backlog straight from the
    database (``run_inbox``): for the sweep's rings, which stand for doorbells that were lost.
    """
    try:
        app.send_task("wakeful.run_inbox", args=[inbox], kwargs={"drain": True} if drain else None,
                      queue=RUNS_QUEUE, expires=expires, ignore_result=True, retry=True,
                      retry_policy=_RETRY)
    except Exception as exc:
        log.warning("doorbell for inbox %r not sent (%s: %s); the sweep will ring it",
                    inbox, type(exc).__name__, exc)


def ring_many(inboxes: Iterable[str], expires: float | None = None, drain: bool = False) -> int:
    rung = 0
    for inbox in dict.fromkeys(inboxes):  # once each, in order
        ring(inbox, expires=expires, drain=drain)
        rung += 1
    return rung


def ring_dispatch(inbox: str) -> None:
    """Ask for ``inbox``'s held messages to be sent now (the gap still applies)."""
    try:
        app.send_task("wakeful.dispatch_outbox", kwargs={"inbox": inbox}, queue=OUTBOX_QUEUE,
                      ignore_result=True, retry=True, retry_policy=_RETRY)
    except Exception as exc:
        log.warning("dispatch for inbox %r not sent (%s: %s); the next tick sends it",
                    inbox, type(exc).__name__, exc)
