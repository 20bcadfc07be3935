"""Every setting of the web edge in one place, each default with the reason it has that value.

Read from the environment once, when the app is built. Secret values never appear in an
error message, a log line or a ``repr``: a wrong setting is named by its variable only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from standardwebhooks.webhooks import Webhook


class SettingsError(ValueError):
    """A web setting that cannot work; the message names the variable, never its value."""


def _secrets(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    # Comma-separated so a secret can be rotated: the new one is added, senders move over,
    # the old one is removed. Order does not matter when verifying.
    raw = env.get(name, "")
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise SettingsError(f"{name} must be an integer") from None
    if value <= 0:
        raise SettingsError(f"{name} must be a positive integer")
    return value


@dataclass(frozen=True)
class WebSettings:
    # One list per sender kind (comma-separated in the environment). A kind with no secret
    # is refused with 403: a receiver is never open to unsigned input.
    github_secrets: tuple[str, ...] = field(default=(), repr=False)
    stripe_secrets: tuple[str, ...] = field(default=(), repr=False)
    # Standard Webhooks secrets, ``whsec_`` + base64 (the prefix is optional, as in the spec).
    webhook_secrets: tuple[str, ...] = field(default=(), repr=False)
    # Keys for approval tokens. The first signs new links; any of them verifies, so a key
    # can be rotated without breaking links already sent. None set: approvals are refused.
    approval_secrets: tuple[str, ...] = field(default=(), repr=False)
    # Fernet keys that open the per-inbox webhook secrets in the store (`wakeful hooks`).
    secrets_key: str = field(default="", repr=False)
    # Largest request body read, in bytes. The store keeps payloads up to 256 KiB as compact
    # JSON; 1 MiB leaves room for pretty-printed senders while bounding the memory one
    # request can take. Refused with 413 from Content-Length, before the body is read.
    max_body_bytes: int = 1024 * 1024
    # Approval answers are a word and a token: anything bigger is not an answer.
    max_approval_body_bytes: int = 4096
    # Seconds a Stripe or Standard Webhooks timestamp may differ from our clock, in BOTH
    # directions: 300 s is both standards' number; the future bound stops a captured request
    # signed with a skewed or forged-ahead clock from being replayable for longer.
    tolerance: int = 300
    # JSON nesting refused above this depth (422). Real webhook payloads are under 10 deep;
    # the store caps stored payloads at 64 and the edge wraps the body one level down.
    max_depth: int = 32
    # Digits allowed in one JSON integer (422 beyond). 64 covers every id and amount a sender
    # uses; Python refuses > 4,300 with a ValueError that must not become a 500.
    max_int_digits: int = 64
    # Lifetime of an approval link when the caller does not say. The store decides the
    # approval's own deadline ("expired" after it); the token only bounds who may answer.
    approval_token_ttl: int = 7 * 86400
    # Seconds a receiver waits for the doorbell before answering anyway. The event is stored
    # and the sweep re-rings, so a broker outage must not make senders (GitHub gives up at
    # 10 s) time out and retry: a ring normally takes about a millisecond.
    ring_timeout: float = 1.0
    # Rings running at once; beyond this a ring is skipped (the sweep covers it), so a broker
    # outage cannot pile up blocked threads.
    rings_in_flight: int = 8
    # Refusals written to the store's rejection table per second (a burst of twice as many
    # is allowed). A flood of garbage must not become a flood of writes to the database that
    # decides what is true; refusals beyond it are still answered, logged and counted.
    rejections_per_second: int = 20
    # Seconds /healthz waits for each of the store and the broker before calling it down.
    health_timeout: int = 3
    # Where approval links point (the public URL of this web process).
    public_url: str = "http://127.0.0.1:8000"

    def __post_init__(self) -> None:
        for secret in self.webhook_secrets:
            try:
                Webhook(secret)
            except Exception:  # noqa: BLE001 - the library raises several types; name the variable only
                raise SettingsError(
                    "WAKEFUL_WEBHOOK_SECRETS holds a value that is not a whsec_ base64 secret"
                ) from None
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
                raise SettingsError(f"{f.name} must be a positive integer")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebSettings:
        env = os.environ if env is None else env
        return cls(
            github_secrets=_secrets(env, "WAKEFUL_GITHUB_SECRETS"),
            stripe_secrets=_secrets(env, "WAKEFUL_STRIPE_SECRETS"),
            webhook_secrets=_secrets(env, "WAKEFUL_WEBHOOK_SECRETS"),
            approval_secrets=_secrets(env, "WAKEFUL_APPROVAL_SECRET"),
            secrets_key=env.get("WAKEFUL_SECRETS_KEY", "").strip(),
            max_body_bytes=_int(env, "WAKEFUL_WEB_MAX_BODY", cls.max_body_bytes),
            tolerance=_int(env, "WAKEFUL_WEB_TOLERANCE", cls.tolerance),
            approval_token_ttl=_int(env, "WAKEFUL_APPROVAL_TOKEN_TTL", cls.approval_token_ttl),
            health_timeout=_int(env, "WAKEFUL_WEB_HEALTH_TIMEOUT", cls.health_timeout),
            public_url=env.get("WAKEFUL_PUBLIC_URL", "").strip() or cls.public_url,
        )


# Where `python -m web` listens. Loopback unless told otherwise: put a TLS-terminating proxy
# in front; these receivers carry credentials (approval tokens) and must not be plain HTTP
# on a public interface.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def listen_address(env: Mapping[str, str] | None = None) -> tuple[str, int]:
    env = os.environ if env is None else env
    host = env.get("WAKEFUL_WEB_HOST", "").strip() or DEFAULT_HOST
    port = _int(env, "WAKEFUL_WEB_PORT", _int(env, "PORT", DEFAULT_PORT))
    return host, port


# Seconds a client has to send a request's headers (serving.py): senders and browsers send
# them at once, and a buffering reverse proxy in front (recommended) sends them whole; a
# half-sent request no longer holds a connection for ever. nginx waits 60 s, Apache's
# mod_reqtimeout 20 s; 10 s is ample for a real client on any link.
DEFAULT_HEADER_TIMEOUT = 10


def header_timeout(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    return _int(env, "WAKEFUL_WEB_HEADER_TIMEOUT", DEFAULT_HEADER_TIMEOUT)


def runtime_settings():  # type: ignore[no-untyped-def]
    """The runtime's settings object (tasks/settings.py): the one source of truth for the
    store and broker URLs, so web and workers can never point at different databases."""
    from tasks.settings import settings

    return settings
