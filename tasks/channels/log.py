"""Channels that write locally: a log line, or a JSON line in a file."""

from __future__ import annotations

import json
import logging
import os
import time

from store import AT_LEAST_ONCE, OutgoingMessage
from store.display import safe

from tasks.channels.fields import as_fields

log = logging.getLogger("wakeful.outbox")


class LogChannel:
    """One log line per send. At-least-once: a repeated line (same key) is harmless.

    The body is the model's text (untrusted): escaped as the operator's views escape it, its
    newlines too, so it can neither drive the terminal that tails the log nor start a line
    that reads as a log record of its own.
    """

    delivery = AT_LEAST_ONCE

    def __call__(self, message: OutgoingMessage) -> None:
        log.info("outbox inbox=%s key=%s kind=%s urgent=%s messages=%d%s: %s", safe(message.inbox), message.key,
                 message.kind, message.urgent, len(message.message_ids), _approvals(message), safe(message.body))


def _approvals(message: OutgoingMessage) -> str:
    """Each approval's fields on the line (escaped: the tool's input is the model's)."""
    parts = []
    for item in message.items:
        fields = item.fields or {}
        if item.kind == "approval":
            deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(fields.get("deadline") or 0)))
            parts.append(f" approval={safe(str(fields.get('inbox')))}/{safe(str(fields.get('request_id')))}"
                         f" tool={safe(str(fields.get('tool')))} input={safe(json.dumps(fields.get('input')))}"
                         f" deadline={deadline} approver={safe(str(fields.get('approver')))}")
    return "".join(parts)


class JsonlChannel:
    """One JSON line per send, appended and flushed (the demo and the tests read it).

    At-least-once: a reader that cares drops a line whose ``key`` it has already seen.
    """

    delivery = AT_LEAST_ONCE

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, message: OutgoingMessage) -> None:
        line = json.dumps({**as_fields(message), "sent_at": time.time()})
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        # O_APPEND: lines from several worker processes never interleave (each write is one
        # small line).
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
