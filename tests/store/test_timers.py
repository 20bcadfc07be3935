"""Timers: every / cron in a time zone, coalesce and each, replays, bounded batches."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from store import InvalidTimer, Store

T = 1_000_000
DAY = 86400
BERLIN = ZoneInfo("Europe/Berlin")


def timer_events(store: Store, inbox: str, prefix: str) -> list:
    return [e for e in store.events(inbox) if e.source_id.startswith(prefix)]


def epoch(*args: int, tz: ZoneInfo = BERLIN) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp())


@pytest.mark.parametrize(
    ("start", "change"),
    [((2026, 3, 25), "spring forward on 29 March"), ((2026, 10, 21), "fall back on 25 October")],
)
def test_daily_0900_berlin_fires_once_per_local_day_across_dst(store: Store, start, change) -> None:
    begin = epoch(*start, 0, 0)
    store.add_timer("a", "morning", begin, {"task": "digest"}, cron="0 9 * * *", tz="Europe/Berlin")
    for now in range(begin, begin + 8 * DAY, 1800):  # a scheduler pass every half hour for 8 days
        store.run_scheduler(now=now)
    fired = [datetime.fromtimestamp(e.payload["scheduled_for"], BERLIN) for e in timer_events(store, "a", "morning@")]
    assert [(d.hour, d.minute) for d in fired] == [(9, 0)] * 8, change
    assert [d.date() for d in fired] == [fired[0].date() + timedelta(days=n) for n in range(8)]
    assert all(e.payload["skipped"] == 0 and e.payload["late_by"] < 1800 for e in timer_events(store, "a", "morning@"))


def test_cron_outage_coalesces_with_skipped(store: Store) -> None:
    begin = epoch(2026, 6, 1, 0, 0)
    store.add_timer("a", "morning", begin, {}, cron="0 9 * * *", tz="Europe/Berlin")
    assert len(store.run_scheduler(now=epoch(2026, 6, 5, 9, 10))) == 1
    [event] = timer_events(store, "a", "morning@")
    assert (event.payload["skipped"], event.payload["late_by"]) == (4, 600)
    assert event.payload["scheduled_for"] == epoch(2026, 6, 5, 9, 0)
    [timer] = store.timers("a")
    assert timer.due == epoch(2026, 6, 6, 9, 0)


def test_misfire_each_emits_every_missed_occurrence_under_its_own_key(store: Store) -> None:
    store.add_timer("a", "billing", T, {"task": "reconcile"}, every=DAY, misfire="each")
    fired = store.run_scheduler(now=T + 3 * DAY + 60)
    assert [f.source_id for f in fired] == [f"billing@{T + n * DAY}" for n in range(4)]
    assert all(f.stored and f.inbox == "a" for f in fired)
    assert [e.payload["skipped"] for e in timer_events(store, "a", "billing@")] == [0, 0, 0, 0]
    assert store.timers("a")[0].due == T + 4 * DAY


def test_misfire_each_is_capped_and_says_so(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(misfire_each_cap=3)
    store.add_timer("a", "tick", T, {}, every=60, misfire="each")
    fired = store.run_scheduler(now=T + 9 * 60)  # ten occurrences missed
    assert [f.source_id for f in fired] == [f"tick@{T + n * 60}" for n in (7, 8, 9)]
    payloads = [e.payload for e in timer_events(store, "a", "tick@")]
    assert [p["skipped"] for p in payloads] == [7, 0, 0]
    assert {p["capped_at"] for p in payloads} == {3}


def test_a_one_off_timer_with_a_fixed_key_fires_once(store: Store) -> None:
    store.add_timer("a", "remind", T + 60, {"text": "call back"}, key=("reminder", "call-42"))
    assert store.run_scheduler(now=T + 59) == []
    [fired] = store.run_scheduler(now=T + 60)
    assert (fired.source, fired.source_id, fired.stored) == ("reminder", "call-42", True)
    assert store.run_scheduler(now=T + 10 * DAY) == []
    assert store.timers("a")[0].done is True


def test_replaying_an_occurrence_stores_nothing_new(store: Store) -> None:
    store.add_timer("a", "digest", T, {}, every=DAY)
    assert [f.stored for f in store.run_scheduler(now=T)] == [True]
    store.add_timer("a", "digest", T, {}, every=DAY)  # a deploy re-registers the old due time
    assert [f.stored for f in store.run_scheduler(now=T)] == [False]
    assert len(timer_events(store, "a", "digest@")) == 1


def test_cancel_timer(store: Store) -> None:
    store.add_timer("a", "t", T, {}, every=60)
    assert store.cancel_timer("a", "t") is True
    assert store.cancel_timer("a", "t") is False
    assert store.run_scheduler(now=T + 600) == []


def test_the_scheduler_works_in_bounded_batches_across_inboxes(store: Store) -> None:
    for n in range(35):
        store.add_timer(f"inbox-{n % 5}", f"t{n}", T + n, {}, every=DAY)
    fired = store.run_scheduler(now=T + 100, limit=10)
    assert sorted(f.timer_id for f in fired) == sorted(f"t{n}" for n in range(35))
    assert {f.inbox for f in fired} == {f"inbox-{n}" for n in range(5)}
    assert store.run_scheduler(now=T + 100, limit=10) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"every": 0}, "every must be a positive number of seconds"),
        ({"every": 60, "cron": "* * * * *"}, "not both"),
        ({"cron": "61 * * * *"}, "is not valid"),
        ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"every": 60, "key": ("x", "y")}, "can't use a fixed event key"),
        ({"every": 60, "misfire": "sometimes"}, "misfire must be one of"),
    ],
)
def test_bad_timers_are_refused_and_store_nothing(store: Store, kwargs, message) -> None:
    with pytest.raises(InvalidTimer, match=message):
        store.add_timer("a", "t", T, {}, **kwargs)
    assert store.timers("a") == []


def test_a_timer_id_too_long_for_its_event_key_is_refused(store: Store) -> None:
    with pytest.raises(InvalidTimer, match="timer_id is 201 characters long"):
        store.add_timer("a", "t" * 201, T, {}, every=60)


def test_an_agent_timer_cannot_carry_a_runtime_source_key(store: Store) -> None:
    from store import InvalidOutcome, Outcome, Timer

    store.request_approval("a", "r1", "refund", 3600, now=T)
    assert store.ingest("a", "chat", "1", {}, now=T)
    gen = store.acquire("a", "w", now=T)
    [event] = store.claim("a", "w", gen, now=T)
    forged = Outcome(timers=[Timer("t", {"answer": "yes"}, after=1, key=("approval", "r1"))])
    with pytest.raises(InvalidOutcome, match="written by wakeful itself"):
        store.finish("a", "w", gen, [event.id], forged, now=T)
