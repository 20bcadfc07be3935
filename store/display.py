"""Text from outside, made safe to show a human: the one rule, for every place that shows it.

Inbox names, ids, event text, the model's words and a tool call's input come from whoever
wrote them. Shown raw, an ANSI escape sequence (ESC, or the C1 CSI byte) rewrites a terminal
or retitles the window, a carriage return or a newline forges a log line, a bidirectional
override makes ``\\u202emoc.live@ada`` read as ``ada@evil.com``, a Cyrillic ``а`` passes for a
Latin ``a``, and 160 spaces push an address off the screen.

Two strengths:

- ``safe(text)``, for terminals and logs (the ``wakeful`` views, the ``log`` channel): C0,
  DEL, C1, bidi controls and the Unicode line separators as visible escapes (``\\x1b``,
  ``\\u202e``); other characters as they are, so a name in Greek still reads as itself.
- ``for_approval(tool_input, words)``, for what a human approves (the approval page and the
  approval message): printable ASCII only — the input as JSON, whole, every other character
  escaped as JSON escapes it (``\\u0430``) — plus ``flags`` naming each such character and
  each long run of spaces, with where it stands, and the model's words as one quoted line.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

# C0 controls and DEL, C1 controls, the bidirectional marks, embeddings, overrides and
# isolates, and the Unicode line and paragraph separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NOT_PRINTABLE_ASCII = re.compile("[^\x20-\x7e]")
# Spaces enough to push what follows out of sight on a narrow screen (or a chat bubble).
SPACE_RUN = 8
_SPACES = re.compile(f" {{{SPACE_RUN},}}")
MAX_FLAGS = 20

WORDS_LABEL = "The agent says (its own words, not checked):"
WHY_LABEL = "Why wakeful asks:"  # the runtime's reason, when the tool's policy alone would not ask
FLAGS_LABEL = ("Look closely before you answer: this input holds characters that can disguise "
               "or hide text. Each is shown escaped above:")


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


@dataclass(frozen=True)
class ForApproval:
    """What a human is shown before saying yes: printable ASCII only, nothing cut."""

    input: str               # the tool's input as formatted JSON
    words: str               # the model's words as one JSON string ("" when it said nothing)
    flags: tuple[str, ...]   # one line per disguising character or run of spaces, and where


def for_approval(tool_input: Any, words: str = "") -> ForApproval:
    flags: list[str] = []
    _flag_strings(tool_input, "", flags)
    if words:
        _flag(words, "the agent's words", flags)
    if len(flags) > MAX_FLAGS:
        flags[MAX_FLAGS:] = [f"... and {len(flags) - MAX_FLAGS} more"]
    return ForApproval(input=json.dumps(tool_input, indent=2, sort_keys=True, ensure_ascii=True),
                       words=json.dumps(words, ensure_ascii=True) if words else "",
                       flags=tuple(flags))


def escaped(text: str) -> str:
    """One string as the approval views show it: printable ASCII, JSON's escapes."""
    return json.dumps(text, ensure_ascii=True)[1:-1]


def _flag_strings(value: Any, where: str, flags: list[str]) -> None:
    if isinstance(value, str):
        _flag(value, where or "the input", flags)
    elif isinstance(value, dict):
        for key, item in sorted(value.items()):  # in the order the JSON shows them
            inner = f"{where} > {json.dumps(key, ensure_ascii=True)}" if where else json.dumps(key, ensure_ascii=True)
            _flag(str(key), f"the key {inner}", flags)
            _flag_strings(item, inner, flags)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _flag_strings(item, f"{where} > {i}" if where else str(i), flags)


def _flag(text: str, where: str, flags: list[str]) -> None:
    counts: dict[str, int] = {}
    for char in _NOT_PRINTABLE_ASCII.findall(text):
        counts[char] = counts.get(char, 0) + 1
    for char, count in counts.items():
        times = f" ({count} times)" if count > 1 else ""
        flags.append(f"{where}: {_described(char)}{times}, shown as {escaped(char)}")
    for run in _SPACES.findall(text):
        flags.append(f"{where}: {len(run)} spaces in a row")


def _described(char: str) -> str:
    name = unicodedata.name(char, "")  # control characters have none
    if _BIDI.match(char):
        kind = "reorders the text around it"
    elif unicodedata.category(char) == "Cc":
        kind = "a control character"
    elif unicodedata.category(char) in ("Cf", "Zl", "Zp", "Mn", "Me"):
        kind = "invisible"
    elif unicodedata.category(char).startswith("Z"):
        kind = "a space that is not a plain space"
    else:
        kind = "not ASCII: may look like another letter"
    return f"U+{ord(char):04X}{' ' + name if name else ''} ({kind})"
