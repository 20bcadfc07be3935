"""store/effects.py on both engines: committed by the fenced finish, run once, settled by the
answer that stands, taken again after a stale executor only when at-least-once."""

from __future__ import annotations

import pytest

from store import AT_MOST_ONCE, Effect, Outcome, Store
from store.effects import LINK_MARKER, idempotency_key

T = 1_000_000


def _run(store: Store, inbox: str, outcome: Outcome, holder: str = "w1", now: int = T) -> bool:
    store.ingest(inbox, "chat", f"m{now}-{holder}", {"text": "go"}, now=now)
    gen = store.acquire(inbox, holder, now=now)
    assert gen is not None
    batch = store.claim(inbox, holder, gen, now=now)
    return store.finish(inbox, holder, gen, [e.id for e in batch], outcome=outcome, now=now)


def test_an_allowed_effect_runs_once_and_wakes_the_agent_with_its_result(store: Store) -> None:
    fx = store.effects
    assert _run(store, "a", Outcome(effects=[Effect("tu1", "refund", {"order": 1})]))
    [row] = fx.view("a")
    assert (row.status, row.attempts, row.idempotency_key) == ("ready", 0, idempotency_key("a", "tu1"))
    assert fx.runnable(stale_after=60, now=T) == [("a", "tu1")]
    took = fx.begin("a", "tu1", stale_after=60, now=T + 1)
    assert took is not None and took.attempts == 1
    assert fx.begin("a", "tu1", stale_after=60, now=T + 2) is None  # another executor: not yours
    assert fx.record("a", "tu1", 1, {"content": "refunded", "is_error": False}, now=T + 3)
    assert not fx.record("a", "tu1", 1, {"content": "again", "is_error": False}, now=T + 4)
    assert fx.get("a", "tu1").status == "done"
    [tool] = [e for e in store.events("a") if e.source == "tool"]
    assert (tool.source_id, tool.payload) == ("tu1", {"tool_use_id": "tu1", "tool": "refund",
                                                      "content": "refunded", "is_error": False})
    assert fx.runnable(stale_after=60, now=T + 1000) == []


def test_a_fenced_finish_commits_no_effect(store: Store) -> None:
    store.ingest("a", "chat", "m1", {"text": "go"}, now=T)
    gen = store.acquire("a", "w1", now=T)
    batch = store.claim("a", "w1", gen, now=T)
    assert store.acquire("a", "w2", now=T + store.settings.lease_ttl + 1) == gen + 1  # takeover
    assert not store.finish("a", "w1", gen, [e.id for e in batch],
                            outcome=Outcome(effects=[Effect("tu1", "refund", {})]), now=T + 200)
    assert store.effects.view("a") == []


@pytest.mark.parametrize("answer, status", [("yes", "ready"), ("no", "refused")])
def test_an_asked_effect_waits_for_the_answer_that_stands(store: Store, answer: str, status: str) -> None:
    fx = store.effects
    assert _run(store, "a", Outcome(effects=[Effect("tu1", "refund", {"order": 7}, approval_ttl=600,
                                                    words="I will refund it")]))
    assert fx.get("a", "tu1").status == "asked"
    assert fx.runnable(stale_after=60, now=T + 1) == []
    [approval] = store.approvals.view("a")
    assert approval.request_id == "tu1" and approval.deadline == T + 600
    [request] = store.outbox("a")
    assert request.urgent and LINK_MARKER.format("tu1") in request.body
    assert '"order": 7' in request.body and "I will refund it" in request.body
    assert store.answer_approval("a", "tu1", answer, now=T + 10) == answer
    assert _run(store, "a", Outcome(answered=["tu1"]), now=T + 20)
    assert fx.get("a", "tu1").status == status
    assert fx.runnable(stale_after=60, now=T + 21) == ([("a", "tu1")] if answer == "yes" else [])


def test_an_expired_approval_never_runs_and_a_late_yes_changes_nothing(store: Store) -> None:
    fx = store.effects
    assert _run(store, "a", Outcome(effects=[Effect("tu1", "refund", {}, approval_ttl=60)]))
    store.run_scheduler(now=T + 61)
    assert store.answer_approval("a", "tu1", "yes", now=T + 62) == "expired"
    assert _run(store, "a", Outcome(answered=["tu1"]), now=T + 70)
    assert fx.get("a", "tu1").status == "expired"
    assert fx.begin("a", "tu1", stale_after=1, now=T + 100) is None


def test_a_dead_executor_is_retried_with_the_same_key_only_when_at_least_once(store: Store) -> None:
    fx = store.effects
    assert _run(store, "a", Outcome(effects=[Effect("least", "refund", {}),
                                             Effect("most", "refund", {}, delivery=AT_MOST_ONCE)]))
    first = fx.begin("a", "least", stale_after=30, now=T + 1)
    assert fx.begin("a", "most", stale_after=30, now=T + 1) is not None
    # both executors die here: nothing recorded
    assert fx.begin("a", "least", stale_after=30, now=T + 20) is None  # not stale yet
    again = fx.begin("a", "least", stale_after=30, now=T + 31)
    assert again is not None and again.attempts == 2 and again.idempotency_key == first.idempotency_key
    assert not fx.record("a", "least", 1, {"content": "late", "is_error": False}, now=T + 32)
    assert fx.begin("a", "most", stale_after=30, now=T + 31) is None
    assert fx.get("a", "most").status == "interrupted"
    [told] = [e for e in store.events("a") if e.source == "tool"]
    assert told.source_id == "most" and told.payload["is_error"] is True


def test_a_bad_effect_fails_the_finish_and_writes_nothing(store: Store) -> None:
    from store import InvalidOutcome

    # Whatever is wrong with an effect, the finish says InvalidOutcome (the runtime then fails
    # the run with that reason) and writes nothing of the Outcome.
    for bad in (Effect("tu1", "refund", {}, approval_ttl=0), Effect("", "refund", {})):
        with pytest.raises(InvalidOutcome):
            _run(store, "a", Outcome(messages=["hi"], effects=[bad]))
        assert store.outbox("a") == [] and store.effects.view("a") == []


def test_a_tool_result_cannot_be_ingested_from_outside(store: Store) -> None:
    from store import InvalidEvent

    with pytest.raises(InvalidEvent, match="reserved"):
        store.ingest("a", "tool", "toolu_1", {"tool_use_id": "toolu_1", "content": "refunded"})
    assert store.events("a") == []
