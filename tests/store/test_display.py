"""The approval views' rule (store/display.py): printable ASCII only, every value whole, each
disguising character and long run of spaces named with where it stands."""

from __future__ import annotations

import json

from store.display import MAX_FLAGS, for_approval


def test_plain_input_is_its_json_and_raises_no_flag() -> None:
    shown = for_approval({"order": 42, "note": "a  b"}, "Refunding it.")
    assert json.loads(shown.input) == {"order": 42, "note": "a  b"}
    assert shown.words == '"Refunding it."' and shown.flags == ()


def test_keys_nested_values_and_words_are_flagged_where_they_stand() -> None:
    shown = for_approval({"to\u200b": [{"name": "J\u00f6rg"}], "pad": " " * 9 + "x"}, "line\none")
    assert shown.input.isascii() and "\\u200b" in shown.input and "\\u00f6" in shown.input
    assert shown.flags == (
        '"pad": 9 spaces in a row',
        'the key "to\\u200b": U+200B ZERO WIDTH SPACE (invisible), shown as \\u200b',
        '"to\\u200b" > 0 > "name": U+00F6 LATIN SMALL LETTER O WITH DIAERESIS (not ASCII: may look '
        'like another letter), shown as \\u00f6',
        "the agent's words: U+000A (a control character), shown as \\n",
    )
    assert shown.words == '"line\\none"'  # one line: the model's words cannot lay out the message


def test_flags_are_capped_and_the_rest_counted() -> None:
    shown = for_approval({f"k{i}": "\u0430" for i in range(MAX_FLAGS + 5)})
    assert len(shown.flags) == MAX_FLAGS + 1 and shown.flags[-1] == "... and 5 more"
