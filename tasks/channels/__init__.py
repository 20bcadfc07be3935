"""Outbox channels: where a merged, paced message goes.

A channel is a callable ``send(message: OutgoingMessage) -> None`` with an optional
``delivery`` attribute, ``AT_LEAST_ONCE`` (the default: a crash between the send and its
record sends again, with the same ``message.key``) or ``AT_MOST_ONCE`` (the rows are marked
sent first: a crash loses the message instead). ``store.dispatch`` calls it outside any
database transaction. Raising means "not sent": the rows stay held for the next dispatch.

Chosen with ``WAKEFUL_OUTBOX_CHANNEL``:

- ``log`` (default): one log line per send (logger ``wakeful.outbox``), the body escaped.
- ``jsonl:/path/file.jsonl``: one JSON line per send, appended and flushed.
- ``http://...`` or ``https://...``: a JSON POST with ``Idempotency-Key`` = the dispatch key.
- ``module:callable``: your own; a zero-argument factory is called once to build the sender
  when the callable has ``wakeful_factory = True``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from store import AT_LEAST_ONCE, OutgoingMessage

from tasks.settings import Settings

Send = Callable[[OutgoingMessage], None]


def load_channel(spec: str, settings: Settings) -> Send:
    from tasks.channels.log import JsonlChannel, LogChannel
    from tasks.channels.webhook import WebhookChannel

    if spec == "log":
        return LogChannel()
    if spec.startswith("jsonl:"):
        return JsonlChannel(spec[len("jsonl:"):])
    if spec.startswith(("http://", "https://")):
        return WebhookChannel(spec, timeout=settings.webhook_timeout,
                              attempts=settings.webhook_attempts,
                              header=settings.webhook_header)
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"outbox channel {spec!r}: use log, jsonl:/path, an http(s) URL "
                         "or module:callable")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if getattr(target, "wakeful_factory", False):
        target = target()
    if not callable(target):
        raise TypeError(f"outbox channel {spec!r} is not callable")
    return target


def delivery_of(send: Send) -> str:
    return getattr(send, "delivery", AT_LEAST_ONCE)
