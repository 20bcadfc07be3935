"""Refused input: one exception type carrying the HTTP status, a stable reason code and a
human message. Raised anywhere in a request, turned into a response and a rejection record
in one place (wakeful/web/app.py), so no code path can refuse without recording.

Reason codes are a small fixed set: they label the metric, so they must stay low-cardinality.
"""

from __future__ import annotations

from dataclasses import dataclass

# code -> the HTTP status it maps to
REASONS: dict[str, int] = {
    "too_large": 413,
    # the body stopped coming: the client left, or the server answered 408 for it
    # (WAKEFUL_WEB_REQUEST_TIMEOUT, wakeful/serving.py); the answer goes nowhere, the record stays
    "incomplete_body": 408,
    "content_type": 415,
    "not_json": 422,
    "too_deep": 422,
    "int_too_long": 422,
    "bad_text": 422,  # \u0000 or a lone surrogate
    "not_object": 422,
    "invalid_event": 422,  # the store's own InvalidEvent
    "missing_header": 422,
    "bad_answer": 422,
    "bad_path": 404,
    "no_signature": 401,
    "bad_signature": 401,
    "stale_timestamp": 401,
    "no_token": 401,
    "bad_token": 403,
    "expired_token": 403,
    "no_secret": 403,
}


@dataclass
class Refused(Exception):
    """Input refused at the edge. Nothing was stored for it."""

    code: str
    detail: str
    source_id: str | None = None

    def __post_init__(self) -> None:
        if self.code not in REASONS:
            raise ValueError(f"unknown refusal code {self.code!r}")
        super().__init__(self.detail)

    @property
    def status(self) -> int:
        return REASONS[self.code]


def storable(text: str | None, limit: int) -> str | None:
    """A bounded string both engines can store: no \\u0000, no lone surrogate."""
    if text is None:
        return None
    text = text.replace("\x00", "\\u0000")
    text = text.encode("utf-8", errors="backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def excerpt(body: bytes, limit: int = 200) -> str:
    """The start of a refused body for an operator: never the whole body, never a header."""
    return storable(body[: limit * 4].decode("utf-8", errors="replace"), limit) or ""
