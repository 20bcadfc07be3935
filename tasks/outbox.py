"""``wakeful.dispatch_outbox``: held messages out through the channel, paced and merged.

With an inbox (sent right after a run that wrote messages) it tries that inbox now, so the
first message after a quiet period goes out at once; without one (the beat tick) it sends
every inbox whose gap has passed, that holds an urgent message, or whose earlier send was
abandoned. The gap, the merge and the delivery mode are the store's rules. After an inbox's
run it also tries the operator inboxes its waiting approvals went to (an approver
``inbox:NAME``), so a request reaches its approver at once too.
"""

from __future__ import annotations

import logging
from typing import Any

from tasks import doorbell, faults
from tasks.application import app, runtime_settings
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
        _channel = faults.wrap_send(with_links(Router(load_channel(settings.outbox_channel, settings), settings)))
        _channel = traced(_channel, settings.outbox_channel)  # a span per send, when traces are on
    return _channel


@app.task(name="wakeful.dispatch_outbox")
def dispatch_outbox(inbox: str | None = None, rung: bool = False) -> dict[str, Any]:
    """``rung``: a coalesced ring (tasks/doorbell.py): ``inbox`` and every inbox rung while
    this task was queued."""
    store = get_store()
    send = get_channel()
    if inbox or rung:
        named = list(dict.fromkeys([*([inbox] if inbox else []), *(doorbell.dispatch_started() if rung else [])]))
        targets = list(dict.fromkeys([*named, *store.approvals.approvers(*named)]))
    else:
        targets = store.outgoing.due()
    done = store.outgoing.dispatch_many(targets, send)
    for name, exc in done.failed.items():
        log.warning("dispatch for inbox %r failed (%s: %s); retried on the next tick",
                    name, type(exc).__name__, exc)
    return {"inboxes": len(targets), "messages_sent": done.sent, "failed": sorted(done.failed)}
