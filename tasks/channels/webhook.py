"""The HTTP webhook channel: a JSON POST per merged message.

``Idempotency-Key`` is the dispatch key, the same on every resend of the same rows, so the
receiver can drop the duplicate an at-least-once resend produces. The JSON is
``tasks.channels.fields.as_fields``: the merged ``body`` and ``kind``, and ``messages`` with
each one's kind and fields (an approval's tool, input, words, deadline and link). Transient failures
(connection errors, timeouts, 408, 429, 5xx) are retried with exponential backoff; any other
answer is final. Raising tells the store the message was not sent.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from store import AT_LEAST_ONCE, OutgoingMessage

from tasks.channels.fields import as_fields

log = logging.getLogger("wakeful.outbox.webhook")

_RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


def shown(url: str) -> str:
    """The URL as logs and errors show it: userinfo and query values (where tokens travel)
    replaced by ``***``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        if parts.username is not None or parts.password is not None:
            host = "***@" + host
        query = urlencode([(k, "***") for k, _ in parse_qsl(parts.query, keep_blank_values=True)])
        return urlunsplit((parts.scheme, host, parts.path, query, ""))
    except ValueError:
        return "<webhook URL>"


class WebhookError(RuntimeError):
    """The receiver did not take the message."""


class WebhookChannel:
    delivery = AT_LEAST_ONCE

    def __init__(self, url: str, *, timeout: float = 10.0, attempts: int = 4,
                 header: str = "", backoff: float = 0.5) -> None:
        self.url = url
        self.shown_url = shown(url)  # the only form of the URL that is ever logged or raised
        self.attempts = attempts
        self.backoff = backoff
        headers = {"User-Agent": "wakeful-outbox/1"}
        if header:
            name, _, value = header.partition(":")
            headers[name.strip()] = value.strip()
        self._client = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
                                    headers=headers)

    def __call__(self, message: OutgoingMessage) -> None:
        body = as_fields(message)
        headers = {"Idempotency-Key": message.key}
        for attempt in range(1, self.attempts + 1):
            try:
                response = self._client.post(self.url, json=body, headers=headers)
            except httpx.TransportError as exc:
                # httpx's message names the failure, never the URL; scrub it anyway
                problem = f"{type(exc).__name__}: {exc}".replace(self.url, self.shown_url)
            else:
                if response.is_success:
                    return
                problem = f"HTTP {response.status_code}"
                if response.status_code not in _RETRY_STATUS:
                    raise WebhookError(f"{self.shown_url} refused message {message.key}: {problem}")
            if attempt < self.attempts:
                delay = self.backoff * 2 ** (attempt - 1)
                log.warning("webhook %s attempt %d/%d failed (%s); retrying in %.1fs",
                            self.shown_url, attempt, self.attempts, problem, delay)
                time.sleep(delay)
        raise WebhookError(f"{self.shown_url} did not take message {message.key} after "
                           f"{self.attempts} attempts: {problem}")

    def __repr__(self) -> str:
        return f"WebhookChannel({self.shown_url!r})"

    def close(self) -> None:
        self._client.close()
