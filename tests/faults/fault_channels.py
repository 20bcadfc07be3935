"""Outbox channels for the fault scenarios: the JSONL channel in either delivery mode.

``WAKEFUL_OUTBOX_CHANNEL=fault_channels:at_most_once`` writes to ``WAKEFUL_FAULTS_SENT``.
"""

from __future__ import annotations

import os

from store import AT_LEAST_ONCE, AT_MOST_ONCE

from tasks.channels.log import JsonlChannel


def _jsonl(delivery: str) -> JsonlChannel:
    channel = JsonlChannel(os.environ["WAKEFUL_FAULTS_SENT"])
    channel.delivery = delivery  # type: ignore[misc]
    return channel


def at_most_once() -> JsonlChannel:
    return _jsonl(AT_MOST_ONCE)


def at_least_once() -> JsonlChannel:
    return _jsonl(AT_LEAST_ONCE)


at_most_once.wakeful_factory = True  # type: ignore[attr-defined]
at_least_once.wakeful_factory = True  # type: ignore[attr-defined]
