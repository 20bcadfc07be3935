"""A secret never travels back: every route secret is replaced in the responses' headers and
bodies before the worker sees them (an upstream that echoes its request headers, or puts the
key in an error message, must not hand it to the model).

Bodies stream: a secret may be split across two chunks (or twenty), so the scrubber holds back
the tail of what it has seen while that tail could still be the start of a secret, and emits
it once the next chunk decides. It never holds more than the longest secret's length. Each
secret is matched as sent and as JSON would escape it (``/`` as ``\\/``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

REDACTED = b"[wakeful: secret removed]"


def _forms(secret: str) -> set[bytes]:
    forms = {secret.encode(), json.dumps(secret)[1:-1].encode(), secret.replace("/", "\\/").encode()}
    return {f for f in forms if f}


class Scrubber:
    """Feed chunks in order, then ``finish``; the output never contains a secret."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = sorted({f for s in secrets for f in _forms(s)}, key=len, reverse=True)
        self._forms = forms
        self._pattern = re.compile(b"|".join(re.escape(f) for f in forms)) if forms else None
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        if self._pattern is None:
            return chunk
        buf = self._pending + chunk
        last_end = 0
        for match in self._pattern.finditer(buf):
            last_end = match.end()
        cut = len(buf) - self._partial_tail(buf, last_end)
        self._pending = buf[cut:]
        return self._pattern.sub(REDACTED, buf[:cut])

    def finish(self) -> bytes:
        rest, self._pending = self._pending, b""
        return self._pattern.sub(REDACTED, rest) if self._pattern is not None else rest

    def _partial_tail(self, buf: bytes, start: int) -> int:
        """Length of the longest end of ``buf`` (after ``start``) that begins some secret."""
        tail = buf[start:]
        longest = 0
        for form in self._forms:
            for k in range(min(len(form) - 1, len(tail)), longest, -1):
                if tail.endswith(form[:k]):
                    longest = k
                    break
        return longest

    def whole(self, value: bytes) -> bytes:
        """One whole value (a header's name or value): every secret replaced."""
        return self._pattern.sub(REDACTED, value) if self._pattern is not None else value
