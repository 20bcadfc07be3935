"""The outbox send as a span of the dispatch's trace (docs/operating.md "Traces").

Its attributes name the inbox, the channel's kind (never its URL: a webhook URL can carry a
token), the dispatch key, how many held messages were merged and the delivery mode; never the
body. Off (no exporter configured), the channel is returned unchanged.
"""

from __future__ import annotations

from typing import Any

from wakeful import telemetry
from store import OutgoingMessage

from tasks.channels import Send, delivery_of


def channel_kind(spec: str) -> str:
    """``log``, ``jsonl``, ``http``/``https`` or ``custom``: what a span may say of a channel."""
    head = spec.partition(":")[0]
    return head if head in ("log", "jsonl", "http", "https") else "custom"


def traced(send: Send, spec: str) -> Send:
    if not telemetry.on():
        return send
    kind, delivery = channel_kind(spec), delivery_of(send)

    def traced_send(message: OutgoingMessage) -> Any:
        with telemetry.span("wakeful.outbox.send", kind=telemetry.PRODUCER, attributes={
                "wakeful.inbox": message.inbox, "wakeful.outbox.channel": kind,
                "wakeful.outbox.key": message.key, "wakeful.outbox.delivery": delivery,
                "wakeful.outbox.urgent": message.urgent,
                "messaging.batch.message_count": len(message.message_ids)}):
            return send(message)

    traced_send.delivery = delivery  # type: ignore[attr-defined]
    return traced_send
