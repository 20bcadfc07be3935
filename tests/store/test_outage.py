"""A run that says "try later" (an outage) on both engines: the attempt given back, the events
waiting as long as the outage has lasted (jittered, capped, a Retry-After honoured), dead
with the reason ``outage`` past the horizon and revived by requeue; an ordinary error still
counts. Effects whose upstream is down wait the same way."""

from __future__ import annotations

from sqlalchemy import select

from store import AT_MOST_ONCE, Effect, Outcome, Store
from store.effects import Effects
from store.tables import events

T = 1_000_000
OUTAGE = {"outage_backoff_base": 5, "outage_backoff_max": 40, "outage_horizon": 200, "lease_ttl": 1000}


def fill(store: Store, inbox: str, *ids: str, now: int = T) -> None:
    for source_id in ids:
        store.ingest(inbox, "chat", source_id, {"text": source_id}, now=now)


def statuses(store: Store, inbox: str) -> dict[str, tuple[str, int]]:
    return {e.source_id: (e.status, e.attempts) for e in store.events(inbox)}


def not_before(store: Store, event_id: int) -> int:
    with store.engine.connect() as conn:
        return conn.execute(select(events.c.not_before).where(events.c.id == event_id)).scalar_one()


def try_later(store: Store, inbox: str, now: int, retry_after: int = 0) -> list[int]:
    """One run of the inbox's claimable events that says "try later"; their ids."""
    gen = store.acquire(inbox, "A", now=now)
    assert gen is not None
    batch = store.claim(inbox, "A", gen, now=now)
    assert batch and all(e.attempts == 1 for e in batch)  # never charged by an earlier outage
    assert store.finish(inbox, "A", gen, [e.id for e in batch], error="APIConnectionError",
                        retry_after=retry_after, now=now)
    assert store.release(inbox, "A", gen, now=now)  # nothing claimable while it waits
    return [e.id for e in batch]


def test_try_later_gives_the_attempt_back_and_waits_as_long_as_the_outage_has_lasted(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(max_attempts=3, **OUTAGE)
    fill(store, "a", "hello", "world")
    now = T
    for _ in range(8):  # far past the attempt cap: an outage is not a poison event
        ids = try_later(store, "a", now)
        assert statuses(store, "a") == {"hello": ("pending", 0), "world": ("pending", 0)}
        grown = min(40, max(5, now - T))  # as long as the outage has lasted, within base..cap
        waits = {not_before(store, i) - now for i in ids}
        assert len(waits) == 1 and grown // 2 <= waits.pop() <= grown  # one jitter per finish
        assert store.runs.sweep_candidates(now=not_before(store, ids[0]) - 1) == []  # no run while waiting
        assert store.runs.sweep_candidates(now=not_before(store, ids[0])) == ["a"]
        now = not_before(store, ids[0])
    gen = store.acquire("a", "A", now=now)
    batch = store.claim("a", "A", gen, now=now)
    assert [e.attempts for e in batch] == [1, 1]  # still claimed together, as fresh events
    assert store.finish("a", "A", gen, [e.id for e in batch], Outcome(messages=["answered"]), now=now)
    assert statuses(store, "a") == {"hello": ("done", 1), "world": ("done", 1)}
    assert [r.outcome for r in store.operator.run_log("a")] == ["waiting"] * 8 + ["done"]


def test_a_retry_after_is_honoured(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(**OUTAGE)
    fill(store, "a", "m")
    [event_id] = try_later(store, "a", T, retry_after=90)  # above the cap: the upstream said so
    assert not_before(store, event_id) == T + 90
    [event_id] = try_later(store, "a", T + 90, retry_after=10_000)  # bounded by the horizon
    assert not_before(store, event_id) == T + 90 + 200


def test_past_the_horizon_events_are_dead_for_an_outage_and_requeue_brings_them_back(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(**OUTAGE)
    fill(store, "a", "m")
    now = T
    while not store.dead("a"):
        [event_id] = try_later(store, "a", now)
        assert now - T <= 200 + 40  # parked at the first try past the horizon, not later
        status = store.status("a", now=now)
        if status.pending:
            assert (status.waiting_on_outage, status.outage_since) == (1, T)
            metrics = store.operator.metrics(now=now)
            assert (metrics["inboxes_waiting_on_outage"], metrics["outage_age"]) == (1, now - T)
            [outage] = store.operator.incidents(since=T)["outages"]
            assert (outage.inbox, outage.events, outage.since) == ("a", 1, T)
        now = max(now + 1, not_before(store, event_id))
    [dead] = store.dead("a")
    assert dead.attempts == 0 and dead.error.startswith("outage: ")
    assert "APIConnectionError" in dead.error
    assert store.operator.metrics(now=now)["inboxes_waiting_on_outage"] == 0
    back = store.requeue(dead.id)
    assert (back.status, back.attempts) == ("pending", 0)
    try_later(store, "a", now)  # a new outage starts its own horizon
    assert statuses(store, "a") == {"m": ("pending", 0)}
    assert store.status("a", now=now).outage_since == now


def test_an_ordinary_error_still_counts_and_ends_the_outage(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(max_attempts=2, backoff_base=1, backoff_max=1, **OUTAGE)
    fill(store, "a", "poison")
    [event_id] = try_later(store, "a", T)
    now = not_before(store, event_id)
    for attempt in (1, 2):
        gen = store.acquire("a", "A", now=now)
        [event] = store.claim("a", "A", gen, now=now)
        assert event.attempts == attempt
        assert store.finish("a", "A", gen, [event.id], error="ValueError: boom", now=now)
        assert store.status("a", now=now).waiting_on_outage == 0  # an error is not an outage
        store.release("a", "A", gen, now=now)
        now += 1
    [dead] = store.dead("a")
    assert (dead.attempts, dead.error) == (2, "ValueError: boom")


def test_a_fenced_try_later_writes_nothing(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(**OUTAGE)
    fill(store, "a", "m")
    gen = store.acquire("a", "A", now=T)
    [event] = store.claim("a", "A", gen, now=T)
    assert store.acquire("a", "B", now=T + 1001) == gen + 1
    assert not store.finish("a", "A", gen, [event.id], error="down", retry_after=5, now=T + 1001)
    assert statuses(store, "a") == {"m": ("running", 1)}


def _executing(store: Store, delivery: str = "at-least-once") -> Effects:
    store.ingest("a", "chat", "m", {"text": "go"}, now=T)
    gen = store.acquire("a", "w", now=T)
    batch = store.claim("a", "w", gen, now=T)
    effect = Effect("tu1", "refund", {"order": 1}, delivery=delivery)  # type: ignore[arg-type]
    assert store.finish("a", "w", gen, [e.id for e in batch], outcome=Outcome(effects=[effect]), now=T)
    fx = store.effects
    assert fx.begin("a", "tu1", stale_after=600, now=T).attempts == 1
    return fx


def test_an_effect_whose_upstream_is_down_waits_and_keeps_its_key(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(**OUTAGE)
    fx = _executing(store)
    key = fx.get("a", "tu1").idempotency_key
    assert fx.postpone("a", "tu1", 2, "502", now=T) is None  # not that attempt: another took over
    assert fx.postpone("a", "tu1", 1, "HTTP 502: upstream_down", retry_after=30, now=T) == "ready"
    assert fx.runnable(stale_after=600, now=T + 29) == []
    assert fx.runnable(stale_after=600, now=T + 30) == [("a", "tu1")]
    again = fx.begin("a", "tu1", stale_after=600, now=T + 30)
    assert (again.attempts, again.idempotency_key) == (2, key)
    assert fx.record("a", "tu1", 2, {"content": "refunded", "is_error": False}, now=T + 31)
    assert [e.source for e in store.events("a")].count("tool") == 1


def test_an_at_most_once_effect_the_upstream_may_have_seen_is_interrupted(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(**OUTAGE)
    fx = _executing(store, AT_MOST_ONCE)
    assert fx.postpone("a", "tu1", 1, "HTTP 504: upstream_timeout", maybe_done=True, now=T) == "interrupted"
    [tool] = [e for e in store.events("a") if e.source == "tool"]
    assert tool.payload["is_error"] and "may or may not have taken effect" in tool.payload["content"]


def test_an_effect_past_the_outage_horizon_is_given_up_and_the_agent_told(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(**OUTAGE)
    fx = _executing(store)
    assert fx.postpone("a", "tu1", 1, "down", now=T) == "ready"
    assert fx.begin("a", "tu1", stale_after=600, now=T + 200).attempts == 2
    assert fx.postpone("a", "tu1", 2, "still down", now=T + 200) == "done"
    [tool] = [e for e in store.events("a") if e.source == "tool"]
    assert tool.payload["is_error"] and "outage horizon" in tool.payload["content"]
