"""Operator calls: dead, requeue, status, sweep candidates, purge, rejections, counters."""

from __future__ import annotations

from store import Message, Outcome, Store

T = 1_000_000
TTL = 120
DAY = 86400


def kill_poison(store: Store, inbox: str, now: int) -> int:
    """Claim the poison event max_attempts times without finishing; return the time after."""
    store.ingest(inbox, "chat", "poison", {"text": "x"}, now=now)
    for _ in range(store.settings.max_attempts + 1):
        gen = store.acquire(inbox, "W", now=now)
        store.claim(inbox, "W", gen, now=now)
        now += TTL + 1
    return now


def test_dead_and_requeue(store: Store) -> None:
    now = kill_poison(store, "a", T)
    [dead] = store.dead()
    assert (dead.inbox, dead.source_id, dead.attempts) == ("a", "poison", 3)
    assert store.dead("b") == []
    requeued = store.requeue(dead.id)
    assert requeued is not None and (requeued.status, requeued.attempts, requeued.error) == ("pending", 0, None)
    assert store.requeue(dead.id) is None  # no longer dead
    assert store.requeue(999_999) is None
    gen = store.acquire("a", "W", now=now)
    assert [(e.source_id, e.attempts) for e in store.claim("a", "W", gen, now=now)] == [("poison", 1)]


def test_status_of_an_inbox(store: Store) -> None:
    empty = store.status("nobody", now=T)
    assert (empty.pending, empty.holder, empty.generation, empty.lease_expires_in) == (0, None, 0, None)
    store.ingest("a", "chat", "m-1", {}, now=T)
    store.ingest("a", "chat", "m-2", {}, now=T + 10)
    store.add_timer("a", "digest", T + 500, {}, every=DAY)
    gen = store.acquire("a", "W", now=T + 20)
    [first, second] = store.claim("a", "W", gen, now=T + 20)
    store.finish("a", "W", gen, [first.id], Outcome(messages=[Message("hi")]), now=T + 20)
    store.request_approval("a", "r1", "refund", 60, now=T + 20)
    status = store.status("a", now=T + 30)
    assert (status.holder, status.generation, status.lease_expires_in) == ("W", 1, TTL - 10)
    assert (status.pending, status.running, status.done, status.dead) == (0, 1, 1, 0)
    assert (status.next_timer_due, status.held_messages, status.pending_approvals) == (T + 80, 1, 1)
    store.ingest("a", "chat", "m-3", {}, now=T + 40)
    assert store.status("a", now=T + 100).oldest_pending_age == 60


def test_sweep_finds_inboxes_with_work_and_no_live_lease(store: Store) -> None:
    store.ingest("lost-doorbell", "chat", "m", {}, now=T)
    store.ingest("busy", "chat", "m", {}, now=T)
    store.acquire("busy", "W", now=T)
    store.ingest("crashed", "chat", "m", {}, now=T)
    gen = store.acquire("crashed", "W", now=T)
    store.claim("crashed", "W", gen, now=T)
    assert store.runs.sweep_candidates(now=T + 1) == ["lost-doorbell"]
    assert store.runs.sweep_candidates(now=T + TTL + 1) == ["lost-doorbell", "busy", "crashed"]


def test_sweep_waits_for_a_backoff(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(backoff_base=30)
    store.ingest("a", "chat", "flaky", {}, now=T)
    gen = store.acquire("a", "W", now=T)
    [event] = store.claim("a", "W", gen, now=T)
    store.finish("a", "W", gen, [event.id], error="boom", now=T)
    store.release("a", "W", gen, now=T)
    assert store.runs.sweep_candidates(now=T + 29) == []
    assert store.runs.sweep_candidates(now=T + 30) == ["a"]


def test_purge_drops_payloads_but_keeps_keys_for_the_dedupe_window(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(dedupe_window=7 * DAY)
    store.ingest("a", "stripe", "evt_1", {"amount": 5}, now=T)
    gen = store.acquire("a", "W", now=T)
    batch = store.claim("a", "W", gen, now=T)
    store.finish("a", "W", gen, [e.id for e in batch], Outcome(messages=["paid"]), now=T)
    store.dispatch("a", lambda m: None, now=T)
    store.operator.record_rejection("task", "bad", now=T)
    store.ingest("a", "chat", "fresh", {"text": "keep me"}, now=T + 2 * DAY)

    counts = store.purge(older_than=DAY, now=T + 2 * DAY)
    assert counts["payloads"] == 1 and counts["events"] == 0 and counts["messages"] == 1
    assert counts["runs"] == 1 and counts["rejected"] == 1
    events = {e.source_id: e for e in store.events("a")}
    assert events["evt_1"].payload is None and events["fresh"].payload == {"text": "keep me"}
    assert store.ingest("a", "stripe", "evt_1", {"amount": 5}, now=T + 3 * DAY) is False  # still refused

    assert store.purge(older_than=DAY, now=T + 8 * DAY)["events"] == 1
    assert store.ingest("a", "stripe", "evt_1", {"amount": 5}, now=T + 8 * DAY) is True


def test_purge_keeps_an_approvals_answer_while_the_approval_is_kept(make_store) -> None:  # type: ignore[no-untyped-def]
    """Retention must not turn a stored yes into "expired": not by emptying the answer's
    payload, nor by deleting its key before the approval (the expiry would then fill it)."""
    store = make_store(dedupe_window=60)
    store.request_approval("a", "refund-1", "refund order 1", 3 * DAY, now=T)
    assert store.answer_approval("a", "refund-1", "yes", now=T + 1) == "yes"
    gen = store.acquire("a", "W", now=T + 2)
    batch = store.claim("a", "W", gen, now=T + 2)
    assert store.finish("a", "W", gen, [e.id for e in batch], now=T + 2)

    counts = store.purge(older_than=0, now=T + DAY)
    assert counts["payloads"] == 0 and counts["events"] == 0
    assert store.answer_approval("a", "refund-1", "no", now=T + DAY) == "yes"
    store.run_scheduler(now=T + 3 * DAY + 1)  # the expiry timer fires into the kept key
    assert store.answer_approval("a", "refund-1", "no", now=T + 3 * DAY + 2) == "yes"
    # Once the approval itself has gone, its answer goes at the next purge.
    assert store.purge(older_than=0, now=T + 3 * DAY + 120)["approvals"] == 1
    assert store.purge(older_than=0, now=T + 3 * DAY + 121)["events"] == 1
    assert store.answer_approval("a", "refund-1", "yes", now=T + 3 * DAY + 122) == "unknown"


def test_rejections_are_recorded_bounded_and_storable(store: Store) -> None:
    store.operator.record_rejection("task", "payload must be a JSON object", inbox="a", source="chat",
                                    source_id="m\x00-1", excerpt="x" * 10_000 + "\x00\ud800", now=T)
    [rejection] = store.operator.rejections()
    assert rejection.origin == "task" and rejection.received == T
    assert rejection.source_id == "m\\u0000-1"
    assert len(rejection.excerpt) <= 500
    assert store.events("a") == []


def test_counters_start_at_zero(store: Store) -> None:
    assert store.operator.counters() == {"lease_takeovers": 0, "stale_finishes_refused": 0}


def test_requeue_a_whole_inbox(store: Store) -> None:
    now = kill_poison(store, "a", T)
    store.ingest("a", "chat", "poison-2", {}, now=now)
    now = kill_poison(store, "a", now)  # its "poison" is a duplicate; "poison-2" dies this time
    assert {e.source_id for e in store.dead("a")} == {"poison", "poison-2"}
    assert [e.status for e in store.console.requeue("op", "a").events] == ["pending", "pending"]
    assert store.dead("a") == [] and store.console.requeue("op", "a").events == ()


def test_metrics_attention_and_incidents(store: Store) -> None:
    now = kill_poison(store, "sick", T)
    store.ingest("waiting", "chat", "m", {}, now=T)
    store.ingest("fresh", "chat", "m", {}, now=now)
    store.add_timer("fresh", "t", now - 5, {}, every=60)
    store.request_approval("fresh", "r1", "refund", 10, now=now)
    store.run_scheduler(now=now + 20)
    store.operator.record_rejection("task", "bad", now=now)
    metrics = store.operator.metrics(now=now + 20)
    assert (metrics["events_pending"], metrics["events_dead"]) == (4, 1)
    assert metrics["oldest_pending_age"] == now + 20 - T
    assert metrics["rejected"] == {"task": 1} and metrics["timers_overdue"] == 0
    assert [s.inbox for s in store.operator.attention(now=now + 20)] == ["sick", "waiting", "fresh"]
    found = store.operator.incidents(since=T)
    assert [e.source_id for e in found["dead"]] == ["poison"]
    assert [e.source_id for e in found["expired_approvals"]] == ["r1"]
    assert store.operator.incidents(since=now + 100) == {"dead": [], "expired_approvals": [], "outages": []}


def test_event_by_id_says_when_it_finished(store: Store) -> None:
    now = kill_poison(store, "a", T)
    [dead] = store.dead("a")
    assert store.operator.event(dead.id) == dead and dead.finished is not None and T < dead.finished <= now
    assert store.operator.event(999_999) is None
