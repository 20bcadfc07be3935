"""Signature checks over the raw request bytes, one function per sender kind.

Each returns nothing or raises ``Refused``: 403 when no secret is configured for the kind (a
receiver is never open to unsigned input), 401 for a missing, malformed or wrong signature
or a timestamp outside the tolerance. Every comparison of a MAC is ``hmac.compare_digest``.
Header parsing is strict and total: any header value a sender can craft ends in ``Refused``,
never in an exception escaping as a 500.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from standardwebhooks.webhooks import Webhook

from .refusals import Refused

_MAX_TIMESTAMP_DIGITS = 12  # seconds since the epoch until the year 33658


def _require_secrets(secrets: Sequence[object], kind: str) -> None:
    if not secrets:
        raise Refused("no_secret", f"no secret is configured for {kind} webhooks")


def check_secret(kind: str, secret: str) -> None:
    """``ValueError`` (naming the kind, never the value) for a secret ``kind`` cannot use:
    Standard Webhooks secrets are ``whsec_`` + base64; the others are any text."""
    if kind == "standard":
        try:
            Webhook(secret)
        except Exception:  # noqa: BLE001 - the library raises several types
            raise ValueError("a Standard Webhooks secret must be whsec_ followed by base64") from None


def _timestamp(raw: str | None, now: int, tolerance: int, header: str) -> int:
    if raw is None or raw == "":
        raise Refused("no_signature", f"missing {header}")
    if not raw.isascii() or not raw.isdigit() or len(raw) > _MAX_TIMESTAMP_DIGITS:
        raise Refused("bad_signature", f"{header} is not an integer number of seconds")
    ts = int(raw)
    # Both directions: the sender libraries bound only the past (stripe-python), and a
    # far-future timestamp would keep a captured request replayable for that long.
    if abs(now - ts) > tolerance:
        raise Refused("stale_timestamp", f"{header} is more than {tolerance} s from our clock")
    return ts


def verify_github(body: bytes, headers: Mapping[str, str], secrets: Sequence[str]) -> None:
    """``X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>``.

    GitHub signs the body only: no timestamp, and the delivery id is not covered. A replay
    of a captured request under the same delivery id is a duplicate (stored once); TLS keeps
    requests from being captured.
    """
    _require_secrets(secrets, "GitHub")
    header = headers.get("x-hub-signature-256")
    if not header:
        raise Refused("no_signature", "missing X-Hub-Signature-256")
    scheme, _, given = header.strip().partition("=")
    if scheme != "sha256" or not given:
        raise Refused("bad_signature", "X-Hub-Signature-256 must be sha256=<hex>")
    given_bytes = given.encode("ascii", errors="replace")
    for secret in secrets:
        expected = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest().encode("ascii")
        if hmac.compare_digest(expected, given_bytes):
            return
    raise Refused("bad_signature", "X-Hub-Signature-256 does not match")


def stripe_signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``v1`` value Stripe sends: hex HMAC-SHA256(secret, "{t}.{body}")."""
    return hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode("ascii") + body, hashlib.sha256).hexdigest()


def verify_stripe(
    body: bytes, headers: Mapping[str, str], secrets: Sequence[str], *, now: int, tolerance: int
) -> None:
    """``Stripe-Signature: t=<seconds>,v1=<hex>[,v1=<hex>...][,v0=...]``.

    Several ``v1`` entries appear while Stripe rolls an endpoint secret; any one matching any
    configured secret passes. The Stripe secret is used as the HMAC key as is, ``whsec_``
    prefix included (that is how Stripe signs).
    """
    _require_secrets(secrets, "Stripe")
    header = headers.get("stripe-signature")
    if not header:
        raise Refused("no_signature", "missing Stripe-Signature")
    stamps: list[str] = []
    given: list[bytes] = []
    for item in header.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            stamps.append(value)
        elif key == "v1":
            given.append(value.encode("ascii", errors="replace"))
    if len(stamps) != 1:
        raise Refused("bad_signature", "Stripe-Signature must carry exactly one t=")
    if not given:
        raise Refused("no_signature", "Stripe-Signature carries no v1 signature")
    ts = _timestamp(stamps[0], now, tolerance, "Stripe-Signature t")
    for secret in secrets:
        expected = stripe_signature(secret, ts, body).encode("ascii")
        # compare against every v1 (no early exit on the first that differs)
        if any([hmac.compare_digest(expected, g) for g in given]):
            return
    raise Refused("bad_signature", "no Stripe-Signature v1 matches")


def standard_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,<base64>`` signature of Standard Webhooks, computed by the reference library.

    The library signs text; a body that is not UTF-8 cannot carry a valid signature.
    """
    text = body.decode("utf-8")
    stamp = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    return Webhook(secret).sign(msg_id=msg_id, timestamp=stamp, data=text)


def verify_standard(
    body: bytes, headers: Mapping[str, str], secrets: Sequence[str], *, now: int, tolerance: int
) -> None:
    """Standard Webhooks: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``.

    The signature header is space-separated ``v1,<base64>`` entries (several while a secret
    rotates). We use the reference library (``standardwebhooks``) to decode ``whsec_``
    secrets and to compute the signature, but parse the headers ourselves: its ``verify``
    lets ``ValueError``/``binascii.Error``/``UnicodeDecodeError`` escape on crafted headers
    or bodies and reads the wall clock directly. Its tolerance is also 300 s both ways.
    """
    _require_secrets(secrets, "Standard Webhooks")
    msg_id = headers.get("webhook-id")
    signature = headers.get("webhook-signature")
    if not msg_id:
        raise Refused("no_signature", "missing webhook-id")
    if not signature:
        raise Refused("no_signature", "missing webhook-signature")
    ts = _timestamp(headers.get("webhook-timestamp"), now, tolerance, "webhook-timestamp")
    given: list[bytes] = []
    for entry in signature.split(" "):
        version, sep, value = entry.partition(",")
        if version != "v1" or not sep:
            continue
        try:
            given.append(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            continue
    if not given:
        raise Refused("bad_signature", "webhook-signature carries no well-formed v1 signature")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("bad_signature", "webhook-signature does not match") from None
    for secret in secrets:
        expected = base64.b64decode(standard_signature(secret, msg_id, ts, body).split(",", 1)[1])
        if any([hmac.compare_digest(expected, g) for g in given]):
            return
    raise Refused("bad_signature", "webhook-signature does not match")
