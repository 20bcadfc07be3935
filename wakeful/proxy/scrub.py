"""A secret never travels back: every route secret is replaced in the responses' headers and
bodies before the worker sees them (an upstream that echoes its request headers, or puts the
key in an error message, must not hand it to the model).

A secret is matched in every form the usual encoders give it, each character on its own (so
an encoder that escapes some characters and not others is caught too): as sent; URL-encoded
(``%XX`` in either case, ``+`` for a space); JSON-escaped (``\\uXXXX`` in either case, and
``\\/``, ``\\"``, ``\\\\``); and as an HTML entity (``&#DD;`` and ``&#xHH;`` with up to four
leading zeros, and every HTML5 name, such as ``&amp;`` or ``&sol;``). Not caught: a secret the
upstream transforms otherwise (base64, double encoding, hashed, reversed).

Bodies stream: a secret may be split across two chunks (or twenty), so the scrubber holds back
the tail of what it has seen while that tail could still be the start of a secret, and emits
it once the next chunk decides. It never holds more than the longest encoded secret.
"""

from __future__ import annotations

import html.entities
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

REDACTED = b"[wakeful: secret removed]"
# PHP writes &#039;: leading zeros are real; bounded, so an encoded secret has a longest length.
_ZEROS = 4


def _entity_names() -> dict[str, list[str]]:
    """Character -> its HTML5 entity names (``&`` -> ``amp;``, ``amp``, ``AMP;``, ``AMP``)."""
    names: dict[str, list[str]] = {}
    for name, value in html.entities.html5.items():
        names.setdefault(value, []).append(name)
    return names


_NAMES = _entity_names()


def _cases(hex_digits: str) -> list[str]:
    """Every upper/lower-case spelling of some hex digits ("4a" -> 4a, 4A)."""
    spellings = [""]
    for d in hex_digits:
        spellings = [s + v for s in spellings for v in dict.fromkeys((d.lower(), d.upper()))]
    return spellings


def char_forms(c: str) -> frozenset[bytes]:
    """Every way an encoder writes the character ``c``. Secrets are printable ASCII
    (wakeful/proxy/routes.py); any other character is matched as its UTF-8 bytes only."""
    forms = {c.encode()}
    if ord(c) > 0x7E:
        return frozenset(forms)
    n = ord(c)
    forms.update(f"%{h}".encode() for h in _cases(f"{n:02x}"))
    forms.update(f"\\u{h}".encode() for h in _cases(f"{n:04x}"))
    forms.add(json.dumps(c)[1:-1].encode())
    if c == "/":
        forms.add(b"\\/")
    if c == " ":
        forms.add(b"+")
    for zeros in range(_ZEROS + 1):
        forms.add(f"&#{'0' * zeros}{n};".encode())
        forms.update(f"&#{x}{'0' * zeros}{h};".encode() for x in "xX" for h in _cases(f"{n:x}"))
    forms.update(f"&{name}".encode() for name in _NAMES.get(c, ()))
    return frozenset(forms)


def _alternation(forms: Iterable[bytes]) -> bytes:
    """A regular expression matching exactly ``forms``, their common beginnings factored out
    (a trie), so the regex engine tries one branch per next byte instead of every form."""
    trie: dict[int, dict] = {}
    ends = -1  # the key that marks "a form ends here" (never a byte)
    for form in forms:
        node = trie
        for byte in form:
            node = node.setdefault(byte, {})
        node[ends] = {}

    def emit(node: dict[int, dict]) -> bytes:
        branches = [re.escape(bytes([b])) + emit(child) for b, child in sorted(node.items()) if b != ends]
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        return b"(?:" + body + b")?" if ends in node else body

    return emit(trie)


@dataclass(frozen=True)
class Secrets:
    """The route secrets, compiled once per process: one regular expression for every encoded
    form of every secret, and each secret's per-character forms for the streaming hold-back.

    Why precompute rather than decode the body: the forms of each character are a few dozen
    fixed strings, compiled once into one pattern that the regex engine runs over each chunk in
    C, with its first bytes as a prefilter (every alternative starts with a literal byte); the
    matched span is the exact bytes to replace. Decoding the body instead would need a Python
    pass over every escape in it and a map from decoded offsets back to the bytes sent."""

    pattern: re.Pattern[bytes] | None
    # per secret, per character: its forms by their first byte
    chars: tuple[tuple[dict[int, tuple[bytes, ...]], ...], ...]
    longest: int  # bytes of the longest encoded secret
    starts: re.Pattern[bytes] | None  # a byte that can begin a secret

    @classmethod
    def of(cls, secrets: Iterable[str]) -> Secrets:
        chars = tuple(dict.fromkeys(tuple(char_forms(c) for c in s) for s in secrets if s))
        if not chars:
            return cls(None, (), 0, None)
        # Grouped by first byte, so each top-level branch starts with a literal byte: the
        # engine then skips every position whose byte cannot begin a secret (its charset prefix).
        by_first: dict[int, list[bytes]] = {}
        for secret in chars:
            rest = b"".join(_group(forms) for forms in secret[1:])
            heads: dict[int, list[bytes]] = {}
            for form in secret[0]:
                heads.setdefault(form[0], []).append(form[1:])
            for first, tails in heads.items():
                by_first.setdefault(first, []).append(_alternation(tails) + rest)
        branches = [re.escape(bytes([first])) + (alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")")
                    for first, alts in sorted(by_first.items())]
        longest = max(sum(max(map(len, forms)) for forms in secret) for secret in chars)
        indexed = tuple(tuple(_by_first_byte(forms) for forms in secret) for secret in chars)
        starts = re.compile(b"[" + b"".join(re.escape(bytes([b])) for b in sorted(by_first)) + b"]")
        return cls(re.compile(b"|".join(branches)), indexed, longest, starts)

    def partial_tail(self, buf: bytes, start: int) -> int:
        """Length of the longest end of ``buf`` (after ``start``) that begins some secret's
        encoded form without completing it: what must wait for the next chunk."""
        if self.starts is None:
            return 0
        for at in self.starts.finditer(buf, max(start, len(buf) - self.longest + 1)):
            tail = buf[at.start():]
            if any(_begins(secret, 0, tail) for secret in self.chars):
                return len(tail)
        return 0


def _by_first_byte(forms: frozenset[bytes]) -> dict[int, tuple[bytes, ...]]:
    index: dict[int, list[bytes]] = {}
    for form in forms:
        index.setdefault(form[0], []).append(form)
    return {first: tuple(group) for first, group in index.items()}


def _group(forms: frozenset[bytes]) -> bytes:
    return b"(?:" + _alternation(forms) + b")"


def _begins(secret: tuple[dict[int, tuple[bytes, ...]], ...], i: int, tail: bytes) -> bool:
    if i == len(secret):
        return False  # a whole match: the pattern would have found it
    if not tail:
        return True  # every character so far was whole: the next one has not come yet
    for form in secret[i].get(tail[0], ()):
        if len(tail) < len(form):
            if form.startswith(tail):
                return True
        elif tail.startswith(form) and _begins(secret, i + 1, tail[len(form):]):
            return True
    return False


class Scrubber:
    """One response's scrubber: feed chunks in order, then ``finish``; the output never
    contains a secret in any form ``Secrets`` knows."""

    def __init__(self, secrets: Secrets | Iterable[str]) -> None:
        self._secrets = secrets if isinstance(secrets, Secrets) else Secrets.of(secrets)
        self._pattern = self._secrets.pattern
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        if self._pattern is None:
            return chunk
        buf = self._pending + chunk
        last_end = 0
        for match in self._pattern.finditer(buf):
            last_end = match.end()
        cut = len(buf) - self._secrets.partial_tail(buf, last_end)
        self._pending = buf[cut:]
        return self._pattern.sub(REDACTED, buf[:cut])

    def finish(self) -> bytes:
        rest, self._pending = self._pending, b""
        return self.whole(rest)

    def whole(self, value: bytes) -> bytes:
        """One whole value (a header's name or value): every secret replaced."""
        return self._pattern.sub(REDACTED, value) if self._pattern is not None else value
