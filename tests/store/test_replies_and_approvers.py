"""Issue 25 in the store: message kinds, the reply rule, one pacing rule, approvers.

A reply to the person the inbox talks to goes inside the gap, a notice in the same gap is
held; a reply nobody asked for is a notice; an approval routed to an operator inbox puts the
request (fields, link marker) in the operator's outbox and only a notice in the requester's;
the answer records who gave it."""

from __future__ import annotations

import pytest

from store import Effect, InvalidEvent, Message, Outcome, OutgoingMessage, Store
from store.effects import LINK_MARKER_PREFIX

T = 1_000_000
H = 3600


def run(store: Store, inbox: str, now: int, source: str, outcome: Outcome) -> None:
    """One event of ``source`` (a timer fired, a tool's result recorded, or ingested from
    outside) and a run that finishes with ``outcome``."""
    if source == "timer":
        store.add_timer(inbox, f"digest-{now}", now, {})
        assert store.run_scheduler(now=now)
    elif source == "tool":
        book = store.effects
        use = f"toolu_{now}"
        _commit(store, inbox, now, Effect(use, "refund", {"order": 1}))
        attempt = book.begin(inbox, use, stale_after=60, now=now)
        assert attempt is not None and book.record(inbox, use, attempt.attempts, {"content": "ok", "is_error": False},
                                                   now=now)
    else:
        store.ingest(inbox, source, f"{source}-{now}-{len(store.events(inbox))}", {"text": "hi"}, now=now)
    gen = store.acquire(inbox, "W", now=now)
    batch = store.claim(inbox, "W", gen, now=now)
    assert store.finish(inbox, "W", gen, [e.id for e in batch], outcome, now=now)
    store.release(inbox, "W", gen, now=now)


def _commit(store: Store, inbox: str, now: int, effect: Effect) -> None:
    """A run with no event of its own commits ``effect`` (as a run that called the tool would)."""
    gen = store.acquire(inbox, "W", now=now)
    assert store.finish(inbox, "W", gen, [], Outcome(effects=[effect]), now=now)
    store.release(inbox, "W", gen, now=now)


def say(*messages: str | Message) -> Outcome:
    return Outcome(messages=list(messages))


def reply(text: str) -> Message:
    return Message(text, kind="reply")


def test_a_reply_goes_inside_the_gap_while_a_notice_in_the_same_gap_is_held(store: Store) -> None:
    sent: list[OutgoingMessage] = []
    run(store, "a", T, "github", say(reply("a push landed")))  # a webhook's run: not owed, a notice
    assert [r.kind for r in store.outbox("a")] == ["notice"]
    assert store.dispatch("a", sent.append, now=T) == 1  # the first after quiet: the gap opens
    run(store, "a", T + 10, "timer", say(reply("your daily digest")))  # unprompted: held
    assert store.dispatch("a", sent.append, now=T + 10) == 0
    run(store, "a", T + 20, "chat", say(reply("hello to you")))  # the person asked: sent now
    assert store.outgoing.due(now=T + 20) == ["a"]
    assert store.dispatch("a", sent.append, now=T + 20) == 1
    assert [(m.kind, m.body) for m in sent] == [("notice", "a push landed"), ("reply", "hello to you")]
    [digest] = [r for r in store.outbox("a") if r.sent_at is None]
    assert (digest.kind, digest.body) == ("notice", "your daily digest")
    # The reply did not restart the gap: the digest goes when the first send's gap ends.
    assert store.outgoing.due(now=T + H - 1) == []
    assert store.dispatch("a", sent.append, now=T + H) == 1 and sent[-1].body == "your daily digest"


def test_one_question_earns_one_reply_even_after_tool_results(store: Store) -> None:
    sent: list[OutgoingMessage] = []
    run(store, "a", T, "chat", say())  # the person asks; the run calls a tool and says nothing
    run(store, "a", T + 1, "tool", say(reply("done: refunded")))  # the answer comes later
    run(store, "a", T + 2, "tool", say(reply("and one more thing")))  # already answered
    assert [r.kind for r in store.outbox("a")] == ["reply", "notice"]
    store.dispatch("a", sent.append, now=T + 2)
    assert [m.kind for m in sent] == ["mixed"]  # the gap was open: both went, merged


def test_pacing_is_one_rule_the_scan_and_the_dispatcher_agree(store: Store) -> None:
    """``outbox_due`` names exactly the inboxes a dispatch then sends something for."""
    run(store, "a", T, "chat", say("first"))
    run(store, "b", T, "chat", say(reply("hi")))
    for inbox in ("a", "b"):
        store.dispatch(inbox, lambda m: None, now=T)
    run(store, "a", T + 5, "chat", say("later"))  # a notice in the gap
    run(store, "b", T + 5, "chat", say(reply("again")))  # a reply: owed, due
    run(store, "c", T + 5, "timer", say(Message("disk full", urgent=True)))
    for now in (T + 5, T + H):
        due = store.outgoing.due(now=now)
        sent = {i: store.dispatch(i, lambda m: None, now=now) for i in ("a", "b", "c")}
        assert sorted(due) == sorted(i for i, n in sent.items() if n), now


def test_a_message_kind_is_reply_or_notice(store: Store) -> None:
    from store import InvalidOutcome

    store.ingest("a", "chat", "1", {}, now=T)
    gen = store.acquire("a", "W", now=T)
    batch = store.claim("a", "W", gen, now=T)
    with pytest.raises(InvalidOutcome, match="reply or a notice, got kind 'approval'"):
        store.finish("a", "W", gen, [e.id for e in batch], say(Message("click", kind="approval")), now=T)  # type: ignore[arg-type]
    assert store.outbox("a") == []


def ask(approver: str | None, tool_use_id: str = "toolu_1") -> Outcome:
    return Outcome(effects=[Effect(tool_use_id, "refund", {"order": 7}, approval_ttl=600,
                                   words="I will refund it", approver=approver)])


def test_an_approval_routed_to_an_operator_inbox(store: Store) -> None:
    run(store, "cust", T, "chat", ask("inbox:ops"))
    [notice] = store.outbox("cust")
    assert (notice.kind, notice.urgent) == ("notice", True) and "waits for approval" in notice.body
    assert LINK_MARKER_PREFIX not in notice.body and "toolu_1" not in notice.body
    assert notice.fields == {"request_id": "toolu_1", "tool": "refund", "status": "waiting",
                             "deadline": T + 600}
    [request] = store.outbox("ops")
    assert (request.kind, request.urgent) == ("approval", True)
    assert LINK_MARKER_PREFIX + "toolu_1]]" in request.body and "(inbox cust)" in request.body
    assert request.fields == {"inbox": "cust", "request_id": "toolu_1", "tool": "refund",
                              "input": {"order": 7}, "words": "I will refund it", "why": "",
                              "deadline": T + 600, "approver": "inbox:ops"}
    assert store.approvals.approvers("cust") == ["ops"]
    [pending] = store.approvals.view("cust")
    assert (pending.approver, pending.answered_by) == ("inbox:ops", None)

    assert store.answer_approval("cust", "toolu_1", "yes", by="inbox:ops", now=T + 5) == "yes"
    assert store.answer_approval("cust", "toolu_1", "no", by="self", now=T + 6) == "yes"  # the first stands
    [answered] = store.approvals.view("cust", pending_only=False)
    assert (answered.answer, answered.approver, answered.answered_by) == ("yes", "inbox:ops", "inbox:ops")
    assert store.approvals.approvers("cust") == []

    # The run that reads the answer settles the effect; the requester is told the decision.
    gen = store.acquire("cust", "W", now=T + 7)
    batch = store.claim("cust", "W", gen, now=T + 7)
    assert store.finish("cust", "W", gen, [e.id for e in batch], Outcome(answered=["toolu_1"]), now=T + 7)
    assert store.effects.get("cust", "toolu_1").status == "ready"
    decided = store.outbox("cust")[-1]
    assert decided.kind == "notice" and "was approved" in decided.body
    assert decided.fields == {"request_id": "toolu_1", "tool": "refund", "status": "approved"}


def test_a_channel_approver_is_sent_apart_and_never_paces_the_inbox(store: Store) -> None:
    sent: list[OutgoingMessage] = []
    run(store, "cust", T, "chat", ask("channel:approvers"))
    assert store.dispatch("cust", sent.append, now=T) == 2
    by_channel = {m.channel: m for m in sent}
    assert set(by_channel) == {None, "approvers"}
    assert by_channel["approvers"].kind == "approval" and by_channel["approvers"].items[0].fields["tool"] == "refund"
    assert by_channel[None].kind == "notice" and LINK_MARKER_PREFIX not in by_channel[None].body


def test_the_inbox_itself_is_the_default_approver(store: Store) -> None:
    run(store, "me", T, "chat", ask(None))
    [request] = store.outbox("me")
    assert request.kind == "approval" and request.fields["approver"] == "self"
    assert store.approvals.view("me")[0].approver == "self"


@pytest.mark.parametrize("bad", ["inbox:", "ops", "channel:no spaces", "email:ops@example.com"])
def test_an_approver_address_is_checked(store: Store, bad: str) -> None:
    from store import InvalidOutcome

    store.ingest("a", "chat", "1", {}, now=T)
    gen = store.acquire("a", "W", now=T)
    batch = store.claim("a", "W", gen, now=T)
    with pytest.raises(InvalidOutcome, match="approver"):
        store.finish("a", "W", gen, [e.id for e in batch], ask(bad), now=T)
    assert store.outbox("a") == [] and store.effects.view("a") == []


def test_who_answered_is_bounded(store: Store) -> None:
    store.request_approval("a", "r1", "refund", 60, now=T)
    with pytest.raises(InvalidEvent, match="by"):
        store.answer_approval("a", "r1", "yes", by="x" * 500, now=T)


def test_a_channel_that_fails_leaves_every_row_held_for_the_next_dispatch(store: Store) -> None:
    run(store, "cust", T, "chat", ask("channel:approvers"))

    def down(message: OutgoingMessage) -> None:
        if message.channel == "approvers":
            raise ConnectionError("the approvers' channel is down")

    with pytest.raises(ConnectionError):
        store.dispatch("cust", down, now=T)
    assert all(r.sent_at is None for r in store.outbox("cust"))
    sent: list[OutgoingMessage] = []
    assert store.dispatch("cust", sent.append, now=T + 1) == 2
    assert sorted(str(m.channel) for m in sent) == ["None", "approvers"]
