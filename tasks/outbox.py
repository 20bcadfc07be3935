"""``wakeful.dispatch_outbox``: held messages out through the channel, paced and merged.

With an inbox (sent right after a run that wrote messages) it tries that inbox now, so the
first message after a quiet period goes out at once; without one (the beat tick) it sends
every inbox whose gap has passed, that holds an urgent message, or whose earlier send was
abandoned. The gap, the merge and the delivery mode are the store's rules. After an inbox's
run it also tries the operator inboxes its waiting approvals went to (an approver
``inbox:NAME``), so a request reaches its approver at once too. The worker takes these
messages in batches (tasks/batches.py): every message waiting is one dispatch.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from tasks import doorbell
from tasks.application import app, runtime_settings
from tasks.batches import BatchTask, batch_span
from tasks.approval_links import with_links
from tasks.channels import Router, Send, load_channel
from tasks.channels.traced import traced
from tasks.runtime import get_store

log = logging.getLogger("wakeful.outbox")

_channel: Send | None = None


def get_channel() -> Send:
    global _channel
    if _channel is None:
        # Approval links are minted here, never in the worker that runs agent code.
        settings = runtime_settings()
        _channel = with_links(Router(load_channel(settings.outbox_channel, settings), settings))
        _channel = traced(_channel, settings.outbox_channel)  # a span per send, when traces are on
    return _channel


def accepts(inbox: str | None = None, rung: bool = False) -> None:
    """What one ``wakeful.dispatch_outbox`` message carries (the guard checks messages against
    it). ``rung``: a coalesced ring (tasks/doorbell.py): ``inbox`` and every inbox rung while
    this task was queued. Neither: the beat tick, every inbox whose messages are due."""


_ACCEPTS = inspect.signature(accepts)


def failed(item: Any, exc: Exception) -> bool:
    """A message whose dispatch raised on its own (the database away, say): dropped, as Celery
    drops a failed task. Nothing is lost: its messages stay held, and the beat tick sends
    what is due."""
    log.warning("dispatch message %s dropped (%s: %s); the next tick sends what is due",
                item.id, type(exc).__name__, exc)
    return True


@app.task(name="wakeful.dispatch_outbox", base=BatchTask, accepts=staticmethod(accepts),
          failed=staticmethod(failed))
def dispatch_outbox(requests: list[Any]) -> dict[str, Any]:
    """Every dispatch message waiting, as one: the inboxes they name (and, for a coalesced
    ring, those rung meanwhile), their approvers' inboxes, and what is due if a tick is among
    them. A batch task (tasks/batches.py) so that these messages never hold the control
    worker's prefetch (1 x its concurrency): as plain tasks, two of them waiting for a pool
    process stopped its consumer from taking ingest messages meanwhile (docs/performance.md)."""
    with batch_span("wakeful.dispatch_outbox", requests):
        return _dispatch(requests)


def _dispatch(requests: list[Any]) -> dict[str, Any]:
    store = get_store()
    send = get_channel()
    asked = [_ACCEPTS.bind(*r.args, **r.kwargs).arguments for r in requests]  # the guard checked they fit
    named = [a["inbox"] for a in asked if a.get("inbox")]
    if any(a.get("rung") for a in asked):
        named += doorbell.dispatch_started()
    named = list(dict.fromkeys(named))
    targets = list(dict.fromkeys([*named, *(store.approvals.approvers(*named) if named else [])]))
    if any(not (a.get("inbox") or a.get("rung")) for a in asked):  # the beat tick
        targets = list(dict.fromkeys([*targets, *store.outgoing.due()]))
    done = store.outgoing.dispatch_many(targets, send)
    for name, exc in done.failed.items():
        log.warning("dispatch for inbox %r failed (%s: %s); retried on the next tick",
                    name, type(exc).__name__, exc)
    summary = {"messages": len(requests), "inboxes": len(targets), "messages_sent": done.sent,
               "failed": sorted(done.failed)}
    log.info("dispatch batch: %s", summary)
    return summary
