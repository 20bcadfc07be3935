"""Approval links, minted where the outbox is dispatched.

A committed approval request for a tool call (store/effects.py) is an outbox row of kind
``approval`` whose fields name the approval (``inbox``, ``request_id``) and its approver, and
whose body carries a marker, ``[[wakeful-approval-link:<tool use id>]]``. The dispatcher,
just before the channel sends, puts a signed link to the approval page (wakeful/approval_tokens.py) in
the item's fields (``link``) and in place of the marker, made for that approval's inbox and
approver (an operator's outbox holds requests of other inboxes). So the key
(``WAKEFUL_APPROVAL_SECRET``) lives with the dispatcher (and the web edge), never in the
worker that runs agent code. Without a key the marker becomes the command that answers it.

Only the marker the store placed becomes a link: an approval item's own (its
``request_id``). Any other marker is text, wherever it came from: text from a model, a tool
or an event is defanged where it is written (``store.effects.defang``), and a writer that
forgets (agent code of one's own quoting an event, say) still cannot turn a stranger's
marker into a signed link to the inbox's pending approval.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from wakeful.approval_tokens import SELF, approval_link
from store import OutboxItem, OutgoingMessage
from store.effects import LINK_MARKER_PREFIX
from tasks.application import runtime_settings

log = logging.getLogger("wakeful.approval_links")
_MARKER = re.compile(re.escape(LINK_MARKER_PREFIX) + r"([^\]\s]{1,256})\]\]")


def with_links(send: Any) -> Any:
    """``send`` with every approval's link minted; keeps its delivery mode."""

    def send_with_links(message: OutgoingMessage) -> Any:
        return send(linked(message))

    send_with_links.delivery = getattr(send, "delivery", "at-least-once")  # type: ignore[attr-defined]
    return send_with_links


def linked(message: OutgoingMessage) -> OutgoingMessage:
    """The message with each approval item's ``link`` field set and its marker replaced, by
    that item's own approval (an operator's message merges requests of several inboxes)."""
    if not any(_asks(item) for item in message.items):
        return message  # no approval request in it: any marker is someone's text
    items = tuple(_linked_item(message.inbox, item) if _asks(item) else item for item in message.items)
    return replace(message, body="\n\n".join(i.body for i in items), items=items)


def _asks(item: OutboxItem) -> bool:
    """An approval request the store wrote (store/effects.py): its fields name the approval.
    (A request stored before migration 0009, which gave outbox rows a kind and fields, reads
    as a notice: its marker stays text, and its approver answers with ``wakeful answer``.)"""
    return item.kind == "approval" and isinstance((item.fields or {}).get("request_id"), str)


def _linked_item(inbox: str, item: OutboxItem) -> OutboxItem:
    fields = item.fields or {}
    made = link(str(fields.get("inbox") or inbox), fields["request_id"], fields.get("approver"))
    mine = fields["request_id"]
    return replace(item, fields={**fields, "link": made},
                   body=_fill(item.body, lambda rid: made if rid == mine else "(no link)"))


def _fill(text: str, make: Callable[[str], str]) -> str:
    return _MARKER.sub(lambda marker: make(marker.group(1)), text) if LINK_MARKER_PREFIX in text else text


def link(inbox: str, request_id: str, approver: str | None = None) -> str:
    routed = approver if approver and approver != SELF else None
    keys = approval_keys()
    if not keys:
        return (f"`wakeful answer {inbox} {request_id} yes|no` (set WAKEFUL_APPROVAL_SECRET and "
                "WAKEFUL_PUBLIC_URL for a link)")
    settings = runtime_settings()
    return approval_link(inbox, request_id, approver=routed, base_url=settings.public_url,
                         secret=keys, expires_in=settings.approval_token_ttl)


def approval_keys() -> tuple[str, ...]:
    """``WAKEFUL_APPROVAL_SECRET``'s keys ("new,old" while rotating: the first signs)."""
    return runtime_settings().approval_secrets
