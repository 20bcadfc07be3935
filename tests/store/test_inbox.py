"""ingest: stored once per (inbox, source, source_id); bad input refused whole, on both engines."""

from __future__ import annotations

import pytest

from store import InvalidEvent, Store

T = 1_000_000


def test_a_duplicate_is_refused_and_reported(store: Store) -> None:
    assert store.ingest("alice", "github", "d-1", {"pr": 1}, now=T) is True
    assert store.ingest("alice", "github", "d-1", {"pr": 2}, now=T + 1) is False
    [event] = store.events("alice")
    assert (event.source, event.source_id, event.payload, event.status, event.attempts) == (
        "github", "d-1", {"pr": 1}, "pending", 0)
    assert event.created == T


def test_keys_are_per_inbox_and_per_source(store: Store) -> None:
    assert store.ingest("alice", "github", "d-1", {}, now=T)
    assert store.ingest("bob", "github", "d-1", {}, now=T)
    assert store.ingest("alice", "stripe", "d-1", {}, now=T)
    assert [len(store.events(i)) for i in ("alice", "bob")] == [2, 1]


def test_without_now_the_database_clock_stamps_the_event(store: Store) -> None:
    import time

    store.ingest("alice", "chat", "m-1", {"text": "hi"})
    [event] = store.events("alice")
    assert abs(event.created - time.time()) < 60  # the database's clock, in epoch seconds


def deep(n: int) -> dict:
    node: dict = {}
    root = node
    for _ in range(n):
        node["x"] = {}
        node = node["x"]
    return root


BAD = [
    pytest.param(("", "chat", "m", {}), "inbox must not be empty", id="empty-inbox"),
    pytest.param(("i" * 129, "chat", "m", {}), "inbox is 129 characters long", id="long-inbox"),
    pytest.param((7, "chat", "m", {}), "inbox must be a string", id="int-inbox"),
    pytest.param(("a", "", "m", {}), "source must not be empty", id="empty-source"),
    pytest.param(("a", "s" * 65, "m", {}), "source is 65 characters long", id="long-source"),
    pytest.param(("a", "chat", "", {}), "source_id must not be empty", id="empty-source-id"),
    pytest.param(("a", "chat", "m" * 257, {}), "source_id is 257 characters long", id="long-source-id"),
    pytest.param(("a", "chat", "m\x00", {}), "source_id contains \\u0000", id="nul-source-id"),
    pytest.param(("a", "chat", "m\ud800", {}), "source_id contains a lone surrogate", id="surrogate-source-id"),
    pytest.param(("a", "chat", "m", [1, 2]), "payload must be a JSON object, got list", id="list-payload"),
    pytest.param(("a", "chat", "m", "text"), "payload must be a JSON object, got str", id="str-payload"),
    pytest.param(("a", "chat", "m", None), "payload must be a JSON object, got NoneType", id="none-payload"),
    pytest.param(("a", "chat", "m", {"t": "a\x00b"}), "payload contains \\u0000", id="nul-value"),
    pytest.param(("a", "chat", "m", {"a\x00": 1}), "payload contains \\u0000", id="nul-key"),
    pytest.param(("a", "chat", "m", {"t": ["\udc80"]}), "lone surrogate", id="surrogate-value"),
    pytest.param(("a", "chat", "m", {"t": float("nan")}), "payload is not JSON", id="nan"),
    pytest.param(("a", "chat", "m", {"t": {1, 2}}), "payload is not JSON", id="set"),
    pytest.param(("a", "chat", "m", {"n": 10**5000}), "payload is not JSON", id="huge-int"),
    pytest.param(("a", "chat", "m", deep(100)), "nested more than 64 levels", id="too-deep"),
    pytest.param(("a", "chat", "m", deep(100_000)), "nested more than 64 levels", id="recursion-bomb"),
    pytest.param(("a", "chat", "m", {"t": "x" * (256 * 1024)}), "the limit is 262144", id="too-big"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_input_says_what_is_wrong_and_stores_nothing(store: Store, args: tuple, message: str) -> None:
    with pytest.raises(InvalidEvent, match=None) as raised:
        store.ingest(*args, now=T)
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)
    inbox = args[0] if isinstance(args[0], str) and args[0] else "a"
    assert store.events(inbox[:128]) == []


def test_the_size_limit_is_a_setting(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(max_payload_bytes=100)
    assert store.ingest("a", "chat", "small", {"t": "x" * 50}, now=T)
    with pytest.raises(InvalidEvent, match="the limit is 100"):
        store.ingest("a", "chat", "big", {"t": "x" * 100}, now=T)
    assert [e.source_id for e in store.events("a")] == ["small"]


def test_unicode_that_postgres_can_store_is_accepted(store: Store) -> None:
    payload = {"text": "grüße 👋 \u2028 \\u0000 as text", "nested": [{"ok": True, "n": None}]}
    assert store.ingest("a", "chat", "ünïcode-✓", payload, now=T)
    assert store.events("a")[0].payload == payload


def test_unknown_settings_are_refused() -> None:
    with pytest.raises(TypeError, match="lease_tll"):
        Store.connect("sqlite:///:memory:", lease_tll=5)
    with pytest.raises(ValueError, match="max_attempts must be a positive integer"):
        Store.connect("sqlite:///:memory:", max_attempts=0)


def test_ingest_many_stores_a_batch_once(store: Store) -> None:
    store.ingest("a", "chat", "m-0", {}, now=T)
    items = [("a", "chat", f"m-{n}", {"n": n}) for n in range(5)] + [("b", "chat", "m-0", {}), ("a", "chat", "m-4", {})]
    assert store.intake.ingest_many(items, now=T) == [False, True, True, True, True, True, False]
    assert [e.source_id for e in store.events("a")] == [f"m-{n}" for n in range(5)]
    assert store.intake.ingest_many([], now=T) == []


def test_ingest_many_takes_a_batch_past_the_engines_parameter_limits(store: Store) -> None:
    """20,000 rows are 80,000 parameters: one statement would be refused by PostgreSQL (65,535)
    and SQLite (32,766). The rows go in chunks, still in one transaction; a key repeated
    across chunks is stored once, at its first copy."""
    items = [(f"i-{n % 50}", "bulk", f"k-{n}", {"n": n}) for n in range(20_000)]
    items.append(("i-0", "bulk", "k-0", {"copy": True}))
    stored = store.intake.ingest_many(items, now=T)
    assert stored == [True] * 20_000 + [False]
    assert len(store.events("i-7")) == 400


def test_ingest_many_refuses_the_whole_batch_for_one_bad_item(store: Store) -> None:
    items = [("a", "chat", "m-1", {}), ("a", "chat", "m-2", ["not", "an", "object"])]
    with pytest.raises(InvalidEvent, match="item 1: payload must be a JSON object, got list"):
        store.intake.ingest_many(items, now=T)
    with pytest.raises(InvalidEvent, match="item 0:"):
        store.intake.ingest_many([("a", "chat")], now=T)  # type: ignore[list-item]
    assert store.events("a") == []
