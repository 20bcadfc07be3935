"""JSON hazards refused as 422 reasons, never as an exception escaping the parser."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from wakeful.web.body import parse_object
from wakeful.web.refusals import Refused


def parse(body: bytes, depth: int = 32, digits: int = 64):  # type: ignore[no-untyped-def]
    return parse_object(body, max_depth=depth, max_int_digits=digits)


def code_of(body: bytes, **kw: int) -> str:
    with pytest.raises(Refused) as info:
        parse(body, **kw)
    return info.value.code


def test_a_plain_object() -> None:
    assert parse(b'{"a": [1, 2.5, "x", null, true], "b": {"c": -12}}') == {
        "a": [1, 2.5, "x", None, True], "b": {"c": -12}}


@pytest.mark.parametrize("body,code", [
    (b"", "not_json"),
    (b"{", "not_json"),
    (b"Hello, World!", "not_json"),
    (b'{"a": NaN}', "not_json"),
    (b'{"a": Infinity}', "not_json"),
    (b'{"a": -Infinity}', "not_json"),
    (b'{"a": 1e999}', "not_json"),
    (b"\xff\xfe{}", "not_json"),  # not UTF-8
    ('{"a": "x"}'.encode("utf-16"), "not_json"),  # the stdlib would sniff UTF-16 from bytes
    (b"\xef\xbb\xbf{}", "not_json"),  # a BOM
    (b"[1, 2]", "not_object"),
    (b'"a string"', "not_object"),
    (b"null", "not_object"),
    (b'{"a": "\\u0000"}', "bad_text"),
    (b'{"\\u0000": 1}', "bad_text"),
    (b'{"a": "\\ud800"}', "bad_text"),  # lone high surrogate
    (b'{"a": ["\\udfff"]}', "bad_text"),  # lone low surrogate, in a list
    (b'{"\\udc00x": 1}', "bad_text"),
])
def test_hazards(body: bytes, code: str) -> None:
    assert code_of(body) == code


def test_a_valid_surrogate_pair_is_fine() -> None:
    assert parse(b'{"a": "\\ud83d\\ude00"}') == {"a": "\U0001F600"}


def test_integer_length() -> None:
    assert parse(b'{"a": ' + b"9" * 64 + b"}")["a"] == int("9" * 64)
    assert parse(b'{"a": -' + b"9" * 64 + b"}")["a"] == -int("9" * 64)
    assert code_of(b'{"a": ' + b"9" * 65 + b"}") == "int_too_long"
    # beyond Python's own 4,300-digit limit: still a refusal, not a ValueError
    assert code_of(b'{"a": ' + b"1" * 5000 + b"}") == "int_too_long"


def test_depth_limit() -> None:
    ok = b'{"a":' * 31 + b"1" + b"}" * 31  # 31 objects deep
    assert parse(ok)
    assert code_of(b'{"a":' * 33 + b"1" + b"}" * 33) == "too_deep"
    assert code_of(b'{"a":' + b"[" * 40 + b"]" * 40 + b"}") == "too_deep"


@pytest.mark.parametrize("depth", [1000, 100_000, 500_000])
def test_depth_far_beyond_the_recursion_limit(depth: int) -> None:
    # The stdlib raises RecursionError (not ValueError) here: it must become a refusal.
    assert code_of(b'{"a":' + b"[" * depth + b"]" * depth + b"}") == "too_deep"
    assert code_of(b"[" * depth) in ("too_deep", "not_json")


@hsettings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_parse_or_refuse(body: bytes) -> None:
    try:
        value = parse(body)
    except Refused:
        return
    assert isinstance(value, dict)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@hsettings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_storable_objects_round_trip(value: dict) -> None:  # type: ignore[type-arg]
    body = json.dumps(value).encode()
    try:
        parsed = parse(body)
    except Refused as refused:
        # only what the store could not keep is refused
        assert refused.code in ("bad_text", "int_too_long"), refused
        return
    assert parsed == value
