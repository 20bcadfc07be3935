"""Shared by the hostile-input tests."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import uuid
from pathlib import Path
from typing import Any

# The approval links' key in the processes the tests start (WAKEFUL_APPROVAL_SECRET).
APPROVAL_SECRET = "hostile-approval-secret"


def stack_env(home: Path, database_url: str, broker_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEFUL_", "FLOWER_"))}
    env.update({
        "WAKEFUL_HOME": str(home),
        "WAKEFUL_DATABASE_URL": database_url,
        "WAKEFUL_BROKER_URL": broker_url,
        "WAKEFUL_OUTBOX_CHANNEL": f"jsonl:{home / 'sent.jsonl'}",
        "WAKEFUL_AGENT": "wakeful.agent.demo:agent",
        "WAKEFUL_SWEEP_INTERVAL": "1",
        "WAKEFUL_SCAN_INTERVAL": "1",
        "WAKEFUL_LEASE_TTL": "5",
        # every refusal of the flood below is recorded (the default bounds the writes)
        "WAKEFUL_REJECTIONS_PER_SECOND": "10000",
        "WAKEFUL_APPROVAL_SECRET": APPROVAL_SECRET,
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra)
    return env


def github_signed(secret: str, payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """A body and the headers GitHub would send with it."""
    body = json.dumps(payload).encode()
    return body, {"content-type": "application/json",
                  "x-hub-signature-256": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
                  "x-github-delivery": str(uuid.uuid4()), "x-github-event": "push"}
