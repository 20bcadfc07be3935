"""Approval links, minted where the outbox is dispatched.

A committed approval request for a tool call (store/effects.py) carries a marker in its body,
``[[wakeful-approval-link:<tool use id>]]``. The dispatcher replaces it, just before the
channel sends, with a signed link to the approval page (web/tokens.py) for the message's own
inbox. So the key (``WAKEFUL_APPROVAL_SECRET``) lives with the dispatcher (and the web edge),
never in the worker that runs agent code. Without a key the marker becomes the command that
answers it. Text from the model or a tool cannot carry a marker (``store.effects.defang``).
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any

from store import OutgoingMessage
from store.effects import LINK_MARKER_PREFIX

log = logging.getLogger("wakeful.approval_links")
_MARKER = re.compile(re.escape(LINK_MARKER_PREFIX) + r"([^\]\s]{1,256})\]\]")


def with_links(send: Any) -> Any:
    """``send`` with every link marker of the message replaced; keeps its delivery mode."""

    def send_with_links(message: OutgoingMessage) -> Any:
        if LINK_MARKER_PREFIX in message.body:
            message = replace(message, body=_MARKER.sub(lambda m: link(message.inbox, m.group(1)), message.body))
        return send(message)

    send_with_links.delivery = getattr(send, "delivery", "at-least-once")  # type: ignore[attr-defined]
    return send_with_links


def link(inbox: str, request_id: str) -> str:
    from web.settings import WebSettings
    from web.tokens import approval_link

    web = WebSettings.from_env()
    if not web.approval_secrets:
        return f"`wakeful answer {inbox} {request_id} yes|no` (set WAKEFUL_APPROVAL_SECRET for a link)"
    return approval_link(inbox, request_id, base_url=web.public_url, secret=web.approval_secrets)
