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
        with store.transactions.transaction() as conn:
            conn.execute(insert(events).values(inbox="a", source="chat", source_id="m-1", created=T))
    with pytest.raises(InvalidEvent, match=r"\(constraint ck_events_status_known\)"):
        with store.transactions.transaction() as conn:
            conn.execute(update(events).values(status="lost"))
    with pytest.raises(InvalidTimer, match=r"\(constraint ck_timers_every_positive\)"):
        with store.transactions.transaction() as conn:
            conn.execute(insert(timers).values(inbox="a", timer_id="t", due=T, every=0, payload={},
                                               misfire="coalesce", done=False))
    assert [e.status for e in store.events("a")] == ["pending"]  # each rolled back whole
    assert store.timers("a") == []


def test_an_unknown_constraint_is_left_as_it_was_raised(store: Store) -> None:
    with pytest.raises(IntegrityError):
        with store.transactions.transaction() as conn:
            conn.execute(insert(events).values(inbox="a", source="chat", source_id=None, created=T))


def test_every_store_error_is_a_wakeful_error_and_still_a_value_error() -> None:
    import store
    from wakeful.errors import WakefulError
    from store.hook_secrets import SecretsKeyError

    for error in (store.InvalidEvent, store.InvalidTimer, store.InvalidOutcome, store.InvalidCall, SecretsKeyError):
        assert issubclass(error, WakefulError) and issubclass(error, ValueError), error


def test_a_callers_mistake_is_a_domain_error_not_a_plain_value_error(store: Store) -> None:
    from store import InvalidCall

    with pytest.raises(InvalidCall, match="older_than must be a non-negative number"):
        store.purge(older_than=-1)
    with pytest.raises(InvalidCall, match="pooler must be one of"):
        Store.connect("sqlite:///unused.db", pooler="session")


def test_statuses_are_enums_equal_to_the_strings_stored(store: Store) -> None:
    from store import EventStatus, RunEnd

    store.ingest("a", "chat", "m-1", {"text": "hi"}, now=T)
    start = store.runs.start("a", "W", now=T)
    assert [e.status for e in start.events] == [EventStatus.RUNNING]
    store.finish("a", "W", start.generation, [e.id for e in start.events], now=T)
    assert [e.status for e in store.events("a", status=EventStatus.DONE)] == ["done"]
    assert [r.outcome for r in store.operator.run_log("a")] == [RunEnd.DONE]
