"""Values from outside reach the operator's terminal escaped, never as control sequences;
``--json`` keeps them exact."""

from __future__ import annotations

import json
from collections.abc import Callable

from store import Store
from store.display import safe

# a window retitle (OSC), a C1 CSI colour, a bidi override and a fake new line
EVIL_INBOX = "\x1b]0;owned\x07ops\u202elive"
EVIL_ID = "d-1\x9b31mRED\r\nfake line"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


def test_every_view_escapes_control_and_bidi_characters(make_store: Callable[..., Store],
                                                        wakeful: Callable[..., object]) -> None:
    store = make_store()
    store.operator.record_rejection("web:hooks/github", "401 bad_signature: \x1b[2J cleared",
                                    inbox=EVIL_INBOX, source="github", source_id=EVIL_ID,
                                    excerpt="\x1b[31m{}")
    assert store.ingest(EVIL_INBOX, "chat", EVIL_ID, {"text": "hi"})
    store.request_approval(EVIL_INBOX, "r\u202e1", "wire \x1b[8mhidden\x1b[0m money", 600)
    for args in (["rejected"], ["status"], ["status", EVIL_INBOX], ["events", "-i", EVIL_INBOX],
                 ["approvals"], ["dead"]):
        result = wakeful(*args)
        assert result.exit_code == 0, (args, result.output)
        for raw in RAW:
            assert raw not in result.output, (args, raw, result.output)
    shown = wakeful("rejected").output
    assert "\\x1b]0;owned\\x07ops\\u202elive" in shown and "\\x9b31mRED\\x0d\\x0afake" in shown
    assert "\\x1b[8mhidden" in wakeful("approvals").output

    [row] = json.loads(wakeful("rejected", "--json").output)
    assert (row["inbox"], row["source_id"]) == (EVIL_INBOX, EVIL_ID)  # exact
    assert all(raw not in wakeful("rejected", "--json").output for raw in RAW)


def test_safe_keeps_ordinary_text() -> None:
    assert safe("café – 東京 ✓ tab\there") == "café – 東京 ✓ tab\\x09here"
    assert safe("two\nlines", keep_newlines=True) == "two\nlines"
