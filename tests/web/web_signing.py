"""Build requests the way each sender signs them (independently of wakeful/web/signatures.py where
the standard allows: GitHub and Stripe by hand from their docs, Standard Webhooks with the
reference library)."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from standardwebhooks.webhooks import Webhook


def body_of(payload: Any) -> bytes:
    return json.dumps(payload).encode("utf-8") if not isinstance(payload, bytes) else payload


def github_headers(secret: str, body: bytes, *, delivery: str | None = None, event: str = "push") -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "content-type": "application/json",
        "x-hub-signature-256": f"sha256={digest}",
        "x-github-delivery": delivery or str(uuid.uuid4()),
        "x-github-event": event,
    }


def stripe_headers(secret: str, body: bytes, *, t: int | None = None, extra_v1: list[str] = ()) -> dict[str, str]:  # type: ignore[assignment]
    t = int(time.time()) if t is None else t
    v1 = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    parts = [f"t={t}", f"v1={v1}", *(f"v1={x}" for x in extra_v1), "v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"]
    return {"content-type": "application/json", "stripe-signature": ",".join(parts)}


def standard_headers(secret: str, body: bytes, *, msg_id: str | None = None, t: int | None = None) -> dict[str, str]:
    t = int(time.time()) if t is None else t
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    sig = Webhook(secret).sign(msg_id, datetime.fromtimestamp(t, tz=timezone.utc), body.decode("utf-8"))
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(t),
        "webhook-signature": sig,
    }
