"""The JSON form of an outgoing message, which the webhook and jsonl channels send."""

from __future__ import annotations

from typing import Any

from store import OutgoingMessage


def as_fields(message: OutgoingMessage) -> dict[str, Any]:
    """The message as JSON: the merged text and, per item, its kind and fields."""
    return {"inbox": message.inbox, "key": message.key, "kind": message.kind, "body": message.body,
            "urgent": message.urgent, "message_ids": list(message.message_ids),
            "messages": [{"id": i.id, "kind": i.kind, "body": i.body, "urgent": i.urgent,
                          "fields": i.fields} for i in message.items]}
