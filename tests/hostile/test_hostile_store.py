"""The store's doors on both engines: runtime sources are not for outsiders, a request id
means one question, and the rejection table stays bounded."""

from __future__ import annotations

import pytest

from store import InvalidEvent, Store
from store.approvals import ApprovalConflict
from store.validate import RUNTIME_SOURCES

T = 1_900_000_000
LATER = T + 400 * 86400  # past every retention window


@pytest.mark.parametrize("source", sorted(RUNTIME_SOURCES))
def test_outside_writes_cannot_use_a_source_the_runtime_writes(store: Store, source: str) -> None:
    store.request_approval("a", "r1", "refund", 3600, now=T)
    with pytest.raises(InvalidEvent, match="written by wakeful itself"):
        store.ingest("a", source, "r1", {"approval": "r1", "answer": "yes"}, now=T)
    with pytest.raises(InvalidEvent, match="written by wakeful itself"):
        store.intake.ingest_many([("a", "chat", "1", {}), ("a", source, "r1", {"answer": "yes"})], now=T)
    with pytest.raises(InvalidEvent, match="written by wakeful itself"):
        store.add_timer("a", "t", T + 1, {"answer": "yes"}, key=(source, "r1"), now=T)
    assert store.events("a") == []  # nothing half-stored: not even the good item of the batch
    # so a forged yes never stands, and the human's no is the answer
    assert store.answer_approval("a", "r1", "no", now=T + 1) == "no"


def test_the_same_request_again_changes_nothing(store: Store) -> None:
    store.request_approval("a", "r1", "roll back deploy 7", 600, now=T)
    store.request_approval("a", "r1", "roll back deploy 7", 6000, now=T + 100)
    [approval] = store.approvals.view("a")
    assert approval.deadline == T + 600  # the first deadline stands
    assert store.answer_approval("a", "r1", "yes", now=T + 200) == "yes"
    store.request_approval("a", "r1", "roll back deploy 7", 600, now=T + 300)  # a retried run
    assert [a.answer for a in store.approvals.view("a", pending_only=False)] == ["yes"]


def test_a_request_id_asked_for_another_action_is_refused_not_inherited(store: Store) -> None:
    store.request_approval("a", "r1", "roll back deploy 7", 600, now=T)
    assert store.answer_approval("a", "r1", "yes", now=T + 10) == "yes"
    with pytest.raises(ApprovalConflict, match="already requested for another action"):
        store.request_approval("a", "r1", "drop the production database", 600, now=T + 20)
    [approval] = store.approvals.view("a", pending_only=False)
    assert approval.action == "roll back deploy 7"
    # the same id in another inbox is another question
    store.request_approval("b", "r1", "drop the production database", 600, now=T + 20)
    assert store.approvals.view("b")[0].answer is None


def test_an_answer_left_after_retention_is_not_inherited_by_a_new_request(store: Store) -> None:
    store.request_approval("a", "r1", "roll back deploy 7", 60, now=T)
    assert store.answer_approval("a", "r1", "yes", now=T + 10) == "yes"
    # retention drops the old request row; its answer event (still pending) stays
    store.purge(86400, now=LATER)
    assert store.approvals.view("a", pending_only=False) == []
    for action in ("roll back deploy 7", "drop the production database"):
        with pytest.raises(ApprovalConflict, match="already answered"):
            store.request_approval("a", "r1", action, 600, now=LATER)
    assert store.approvals.view("a", pending_only=False) == []  # nothing half-stored


def test_the_rejection_table_keeps_the_newest_rows_up_to_its_cap(store: Store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from store import inbox as inbox_rules

    monkeypatch.setattr(inbox_rules, "REJECTIONS_KEPT", 5)
    for n in range(12):
        store.operator.record_rejection("queue:celery", f"flood {n}", excerpt="x" * 10_000)
    rows = store.operator.rejections(limit=100)
    assert [r.reason for r in rows] == [f"flood {n}" for n in range(11, 6, -1)]
    assert all(len(r.excerpt) <= 500 for r in rows)  # never the whole body
