"""Reading and parsing request bodies with every HTTP-level hazard bounded.

- size: refused from ``Content-Length`` before a byte is read, and again while streaming
  (a chunked body has no length), so memory per request is bounded by the limit;
- time: a body not whole within ``WAKEFUL_WEB_REQUEST_TIMEOUT`` is answered 408 by the server
  (wakeful/serving.py) and reaches the route as a disconnect, refused ``incomplete_body``;
- content type: only ``application/json`` (charset utf-8 if given) reaches a receiver;
- JSON: strict UTF-8 (no UTF-16/32 sniffing), no NaN/Infinity, bounded integer length,
  bounded depth, no ``\\u0000``, no lone surrogate, an object at the top. Every failure is a
  ``Refused`` (422), never a ``RecursionError`` or a ``ValueError`` escaping as a 500.
"""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.requests import ClientDisconnect, Request

from .refusals import Refused

# A Content-Length longer than this many digits is over any limit (and int() on thousands of
# digits raises ValueError in Python >= 3.11).
_MAX_LENGTH_DIGITS = 15


def check_json_content_type(request: Request) -> None:
    raw = request.headers.get("content-type")
    if raw is None:
        raise Refused("content_type", "Content-Type must be application/json")
    media, _, params = raw.partition(";")
    if media.strip().lower() != "application/json":
        raise Refused("content_type", "Content-Type must be application/json")
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            raise Refused("content_type", "the only charset accepted is utf-8")


async def read_bounded(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        declared = declared.strip()
        if len(declared) > _MAX_LENGTH_DIGITS or (declared.isdigit() and int(declared) > limit):
            raise Refused("too_large", f"body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise Refused("too_large", f"body is larger than {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise Refused("incomplete_body", "the body did not arrive whole in time") from None
    return b"".join(chunks)


class _Hazard(ValueError):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


def _parse_int(max_digits: int):  # type: ignore[no-untyped-def]
    def parse(text: str) -> int:
        if len(text.lstrip("-")) > max_digits:
            raise _Hazard("int_too_long", f"an integer has more than {max_digits} digits")
        return int(text)

    return parse


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Hazard("not_json", "a number is out of range (would be infinite)")
    return value


def _parse_constant(text: str) -> Any:
    raise _Hazard("not_json", f"{text} is not JSON")


def parse_object(body: bytes, *, max_depth: int, max_int_digits: int) -> dict[str, Any]:
    """The body as a JSON object, or ``Refused`` saying what is wrong with it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("not_json", "body is not valid UTF-8") from None
    try:
        value = json.loads(
            text,
            parse_int=_parse_int(max_int_digits),
            parse_float=_parse_float,
            parse_constant=_parse_constant,
        )
    except _Hazard as hazard:
        raise Refused(hazard.code, str(hazard)) from None
    except RecursionError:
        raise Refused("too_deep", f"JSON is nested more than {max_depth} levels deep") from None
    except ValueError as exc:  # JSONDecodeError and friends
        raise Refused("not_json", f"body is not JSON: {_short(exc)}") from None
    if not isinstance(value, dict):
        raise Refused("not_object", f"body must be a JSON object, got {type(value).__name__}")
    check_tree(value, max_depth=max_depth)
    return value


def check_tree(root: Any, *, max_depth: int) -> None:
    """Depth and storable text, walked without recursion (a hostile tree cannot blow the stack)."""
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > max_depth:
                raise Refused("too_deep", f"JSON is nested more than {max_depth} levels deep")
            for key, child in node.items():
                _check_text(key)
                stack.append((child, depth + 1))
        elif isinstance(node, list):
            if depth > max_depth:
                raise Refused("too_deep", f"JSON is nested more than {max_depth} levels deep")
            stack.extend((child, depth + 1) for child in node)
        elif isinstance(node, str):
            _check_text(node)


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise Refused("bad_text", "JSON contains \\u0000, which cannot be stored")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused("bad_text", "JSON contains a lone surrogate (not valid Unicode)") from None


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) <= 120 else text[:119] + "…"
