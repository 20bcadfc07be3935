"""Channels that write locally: a log line, or a JSON line in a file."""

from __future__ import annotations

import json
import logging
import os
import time

from store import AT_LEAST_ONCE, OutgoingMessage
from store.display import safe

log = logging.getLogger("wakeful.outbox")


class LogChannel:
    """One log line per send. At-least-once: a repeated line (same key) is harmless.

    The body is the model's text (untrusted): escaped as the operator's views escape it, its
    newlines too, so it can neither drive the terminal that tails the log nor start a line
    that reads as a log record of its own.
    """

    delivery = AT_LEAST_ONCE

    def __call__(self, message: OutgoingMessage) -> None:
        log.info("outbox inbox=%s key=%s urgent=%s messages=%d: %s", safe(message.inbox), message.key,
                 message.urgent, len(message.message_ids), safe(message.body))


class JsonlChannel:
    """One JSON line per send, appended and flushed (the demo and the tests read it).

    At-least-once: a reader that cares drops a line whose ``key`` it has already seen.
    """

    delivery = AT_LEAST_ONCE

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, message: OutgoingMessage) -> None:
        line = json.dumps({"inbox": message.inbox, "key": message.key, "body": message.body,
                           "urgent": message.urgent, "message_ids": list(message.message_ids),
                           "sent_at": time.time()})
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        # O_APPEND: lines from several worker processes never interleave (each write is one
        # small line).
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
