"""A database error from a named constraint reaches the caller as its rule's domain error."""

from __future__ import annotations

import pytest
from sqlalchemy import insert, update
from sqlalchemy.exc import IntegrityError

from store import InvalidEvent, InvalidTimer, Store
from store.tables import events, timers

T = 1_000_000


def test_constraint_errors_are_mapped_by_constraint_name(store: Store) -> None:
    store.ingest("a", "chat", "m-1", {"text": "hi"}, now=T)
    with pytest.raises(InvalidEvent, match=r"stored already \(constraint uq_events_key\)"):
        with store._transaction() as conn:
            conn.execute(insert(events).values(inbox="a", source="chat", source_id="m-1", created=T))
    with pytest.raises(InvalidEvent, match=r"\(constraint ck_events_status_known\)"):
        with store._transaction() as conn:
            conn.execute(update(events).values(status="lost"))
    with pytest.raises(InvalidTimer, match=r"\(constraint ck_timers_every_positive\)"):
        with store._transaction() as conn:
            conn.execute(insert(timers).values(inbox="a", timer_id="t", due=T, every=0, payload={},
                                               misfire="coalesce", done=False))
    assert [e.status for e in store.events("a")] == ["pending"]  # each rolled back whole
    assert store.timers("a") == []


def test_an_unknown_constraint_is_left_as_it_was_raised(store: Store) -> None:
    with pytest.raises(IntegrityError):
        with store._transaction() as conn:
            conn.execute(insert(events).values(inbox="a", source="chat", source_id=None, created=T))
