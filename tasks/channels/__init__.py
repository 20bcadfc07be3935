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

A message has a kind (``reply``, ``notice``, ``approval``, or ``mixed`` for a merge) and its
items one by one (``message.items``), an approval's with its fields (``inbox``,
``request_id``, ``tool``, ``input``, ``words``, ``why``, ``deadline``, ``approver``, ``link``);
``as_fields`` is the JSON form the webhook and jsonl channels send. A channel that wants only
text reads ``message.body``. The fields' text (the input, the model's words) is the model's:
escape it wherever it is shown.

Named channels (an approver ``channel:NAME``, store/approvals.py) are read from
``WAKEFUL_CHANNEL_<NAME>``, in the same forms; ``Router`` sends each message through its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from store import AT_LEAST_ONCE, OutgoingMessage

from wakeful.agent.loading import import_callable

from wakeful.settings import RuntimeSettings, channel_spec
from tasks.channels.fields import as_fields  # noqa: F401 - a channel's JSON form, as before

Send = Callable[[OutgoingMessage], None]


def load_channel(spec: str, settings: RuntimeSettings) -> Send:
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
    try:
        target: Any = import_callable(spec)
    except ValueError:
        raise ValueError(f"outbox channel {spec!r}: use log, jsonl:/path, an http(s) URL "
                         "or module:callable") from None
    if getattr(target, "wakeful_factory", False):
        target = target()
    if not callable(target):
        raise TypeError(f"outbox channel {spec!r} is not callable")
    return target


def delivery_of(send: Send) -> str:
    return getattr(send, "delivery", AT_LEAST_ONCE)


class Router:
    """The deployment's channel, and each named channel (``WAKEFUL_CHANNEL_<NAME>``) for the
    messages addressed to it, each loaded once. An unset name raises: the message stays
    held, the dispatch is logged and tried again on the next tick."""

    def __init__(self, default: Send, settings: RuntimeSettings, env: Mapping[str, str] | None = None) -> None:
        self.default = default
        self.settings = settings
        self.env = os.environ if env is None else env
        self.named: dict[str, Send] = {}
        self.delivery = delivery_of(default)

    def __call__(self, message: OutgoingMessage) -> None:
        self.channel(message.channel)(message)

    def channel(self, name: str | None) -> Send:
        if name is None:
            return self.default
        if name not in self.named:
            spec = channel_spec(name, self.env)
            if not spec:
                raise ValueError(f"outbox channel {name!r}: {channel_variable(name)} is not set "
                                 "(an approver channel:NAME needs it)")
            self.named[name] = load_channel(spec, self.settings)
        return self.named[name]
