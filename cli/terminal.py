"""Text from outside, made safe to print on an operator's terminal.

Inbox names, ids, reasons, excerpts and payload text come from whoever sent them. Printed
raw, an ANSI escape sequence (ESC, or the C1 CSI byte) can rewrite the screen, retitle the
window or hide lines, and a bidirectional override can make ``evil`` read as ``live``. Every
human-readable view prints them through ``safe()``, which shows each such character as a
visible escape (``\\x1b``, ``\\u202e``). ``--json`` output is left exact: ``json.dumps``
already writes every control and non-ASCII character as ``\\uXXXX``.
"""

from __future__ import annotations

import re

# C0 controls and DEL, C1 controls, the bidirectional marks, embeddings, overrides and
# isolates, and the Unicode line and paragraph separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with every unsafe character shown as an escape (newlines kept if asked:
    for a multi-line block this program laid out itself)."""
    value = str(text)
    if keep_newlines:
        return "\n".join(_UNSAFE.sub(_escape, line) for line in value.split("\n"))
    return _UNSAFE.sub(_escape, value)
