"""Input checks shared by every write path: one set of rules on both engines.

PostgreSQL's ``jsonb`` and ``text`` refuse ``\\u0000`` and lone surrogates while SQLite
stores them; checking here first means both engines refuse the same input with the same
message, before anything is written.
"""

from __future__ import annotations

import json
from typing import Any

from .records import InvalidEvent
from .tables import INBOX_MAX, SOURCE_ID_MAX, SOURCE_MAX


def name(field: str, value: Any, limit: int) -> str:
    """A non-empty, bounded, storable string (an inbox, a source, a source id, a timer id)."""
    if not isinstance(value, str):
        raise InvalidEvent(f"{field} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidEvent(f"{field} must not be empty")
    if len(value) > limit:
        raise InvalidEvent(f"{field} is {len(value)} characters long; the limit is {limit}")
    _storable_text(field, value)
    return value


def inbox(value: Any) -> str:
    return name("inbox", value, INBOX_MAX)


def key(source: Any, source_id: Any) -> tuple[str, str]:
    return name("source", source, SOURCE_MAX), name("source_id", source_id, SOURCE_ID_MAX)


# Sources the runtime writes itself: an event under one of them says "wakeful did this" (an
# approval's answer or expiry, a timer firing), and an agent acts on it. Nothing from
# outside (a task call, a webhook, the CLI's ingest, an agent's timer key) may write one.
# The one list: a new runtime-written source goes here.
RUNTIME_SOURCES = frozenset({"approval", "timer", "tool"})  # tool: store/effects.py


def outside_key(source: Any, source_id: Any) -> tuple[str, str]:
    """``key()`` for an event that comes from outside the runtime: a runtime source is refused."""
    source, source_id = key(source, source_id)
    if source in RUNTIME_SOURCES:
        raise InvalidEvent(
            f"source {source!r} is written by wakeful itself and cannot be ingested "
            f"(reserved: {', '.join(sorted(RUNTIME_SOURCES))}); an approval is answered through "
            f"its signed link, `wakeful answer`, or wakeful.answer_approval with its token")
    return source, source_id


MAX_DEPTH = 64  # deeper than any real webhook; far below what makes json recurse out


def payload(value: Any, max_bytes: int) -> dict[str, Any]:
    """A JSON object of at most ``max_bytes`` UTF-8 bytes, storable on both engines."""
    if not isinstance(value, dict):
        raise InvalidEvent(f"payload must be a JSON object, got {type(value).__name__}")
    _walk(value)
    try:
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"payload is not JSON: {exc}") from None
    try:
        size = len(encoded.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidEvent("payload contains a lone surrogate (not valid Unicode)") from None
    if size > max_bytes:
        raise InvalidEvent(f"payload is {size} bytes as JSON; the limit is {max_bytes}")
    return value


def _walk(root: dict[str, Any]) -> None:
    """Depth and \\u0000 checks without recursion (a hostile payload cannot blow the stack)."""
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidEvent(f"payload is nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(k, str) and "\x00" in k:
                    raise InvalidEvent("payload contains \\u0000, which PostgreSQL cannot store")
                stack.append((v, depth + 1))
        elif isinstance(node, (list, tuple)):
            stack.extend((v, depth + 1) for v in node)
        elif isinstance(node, str) and "\x00" in node:
            raise InvalidEvent("payload contains \\u0000, which PostgreSQL cannot store")


def text_value(field: str, value: Any) -> str:
    """Free text (a message body, an action): a string PostgreSQL can store."""
    if not isinstance(value, str):
        raise InvalidEvent(f"{field} must be a string, got {type(value).__name__}")
    _storable_text(field, value)
    return value


def _storable_text(field: str, value: str) -> None:
    if "\x00" in value:
        raise InvalidEvent(f"{field} contains \\u0000, which PostgreSQL cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidEvent(f"{field} contains a lone surrogate (not valid Unicode)") from None


def excerpt(value: Any, limit: int = 500) -> str:
    """A bounded, storable preview of rejected input for operators (never the whole body)."""
    if isinstance(value, (bytes, bytearray)):
        text = bytes(value[: limit * 4]).decode("utf-8", errors="replace")
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=True, default=repr)[: limit * 4]
        except (RecursionError, ValueError):
            text = repr(value)[: limit * 4]
    text = text.replace("\x00", "\\u0000").encode("utf-8", errors="backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 1] + "…"
