"""Approvals (one key for the answer and its expiry) and the paced, merged outbox."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from sqlalchemy import event

from store import AT_MOST_ONCE, InvalidEvent, Message, Outcome, OutgoingMessage, Store

T = 1_000_000
H = 3600


# -- approvals ------------------------------------------------------------------------------

def test_an_answer_before_the_deadline_stands_and_a_second_tap_is_told_so(store: Store) -> None:
    store.request_approval("a", "r1", "refund order 1", 4 * H, now=T)
    assert [a.request_id for a in store.approvals.view("a")] == ["r1"]
    assert store.answer_approval("a", "r1", "no", now=T + H) == "no"
    assert store.answer_approval("a", "r1", "yes", now=T + 2 * H) == "no"
    assert store.approvals.view("a") == []  # answered: no longer pending
    [answer] = store.events("a")
    assert (answer.source, answer.source_id, answer.payload) == (
        "approval", "r1", {"approval": "r1", "answer": "no", "action": "refund order 1"})


def test_an_answered_approval_s_expiry_timer_is_done(store: Store) -> None:
    """Its event can never be stored (the answer holds the key): the timer is not live."""
    store.request_approval("a", "r1", "refund", 4 * H, now=T)
    assert [t.done for t in store.timers("a")] == [False]
    assert store.answer_approval("a", "r1", "yes", now=T + H) == "yes"
    assert [t.done for t in store.timers("a")] == [True]
    assert store.run_scheduler(now=T + 5 * H) == []


def test_the_deadline_itself_is_expired(store: Store) -> None:
    store.request_approval("a", "r1", "refund", 60, now=T)
    assert store.answer_approval("a", "r1", "yes", now=T + 60) == "expired"
    [expiry] = store.events("a")
    assert expiry.payload["answer"] == "expired" and expiry.payload["action"] == "refund"
    assert store.run_scheduler(now=T + 120) == []  # the answer path already fired the timer


def test_approvals_are_per_inbox(store: Store) -> None:
    store.request_approval("a", "r1", "refund", 60, now=T)
    assert store.answer_approval("b", "r1", "yes", now=T) == "unknown"
    assert store.answer_approval("a", "r1", "yes", now=T) == "yes"


def test_an_answer_must_be_yes_or_no(store: Store) -> None:
    store.request_approval("a", "r1", "refund", 60, now=T)
    with pytest.raises(InvalidEvent, match="'yes' or 'no', got 'maybe'"):
        store.answer_approval("a", "r1", "maybe", now=T)
    assert store.events("a") == []


# -- outbox ---------------------------------------------------------------------------------

def write(store: Store, inbox: str, now: int, *messages: str | Message) -> None:
    """Messages reach the outbox only through a run's finish."""
    store.ingest(inbox, "chat", f"in-{now}-{len(store.events(inbox))}", {}, now=now)
    gen = store.acquire(inbox, "W", now=now)
    batch = store.claim(inbox, "W", gen, now=now)
    assert store.finish(inbox, "W", gen, [e.id for e in batch], Outcome(messages=list(messages)), now=now)


def test_the_gap_holds_and_merges(store: Store) -> None:
    sent: list[OutgoingMessage] = []
    write(store, "a", T, "one")
    assert store.dispatch("a", sent.append, now=T) == 1
    write(store, "a", T + 60, "two")
    write(store, "a", T + 120, "three")
    assert store.dispatch("a", sent.append, now=T + H - 1) == 0
    assert store.dispatch("a", sent.append, now=T + H) == 2
    assert [m.body for m in sent] == ["one", "two\n\nthree"]
    assert sent[1].key != sent[0].key and len(sent[1].message_ids) == 2
    assert all(m.sent_at is not None for m in store.outbox("a"))


def test_an_urgent_message_goes_at_once_carries_the_rest_and_restarts_the_gap(store: Store) -> None:
    sent: list[OutgoingMessage] = []
    write(store, "a", T, "hello")
    store.dispatch("a", sent.append, now=T)
    write(store, "a", T + 60, "fyi", Message("server down", urgent=True))
    assert store.dispatch("a", sent.append, now=T + 60) == 2
    assert (sent[-1].body, sent[-1].urgent) == ("server down\n\nfyi", True)
    write(store, "a", T + 120, "later")
    assert store.dispatch("a", sent.append, now=T + H + 1) == 0  # the gap counts from the urgent send
    assert store.dispatch("a", sent.append, now=T + 60 + H) == 1


def test_a_gap_of_0_paces_nothing_and_a_negative_one_is_refused(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(outbox_gap=0)
    sent: list[OutgoingMessage] = []
    for n, body in enumerate(("one", "two", "three")):
        write(store, "a", T + n, body)
        assert store.dispatch("a", sent.append, now=T + n) == 1
    assert [m.body for m in sent] == ["one", "two", "three"]
    with pytest.raises(ValueError, match="outbox_gap must be a whole number >= 0"):
        make_store(outbox_gap=-1)


def test_gaps_are_per_inbox(store: Store) -> None:
    sent: list[OutgoingMessage] = []
    write(store, "a", T, "to a")
    write(store, "b", T, "to b")
    assert store.dispatch("a", sent.append, now=T) == 1
    assert store.dispatch("b", sent.append, now=T) == 1
    assert store.outgoing.due(now=T) == []


def test_outbox_due_lists_the_inboxes_a_dispatch_would_send(store: Store) -> None:
    write(store, "a", T, "first")
    write(store, "b", T, "first")
    assert store.outgoing.due(now=T) == ["a", "b"]
    store.dispatch("a", lambda m: None, now=T)
    write(store, "a", T + 1, "second")
    assert store.outgoing.due(now=T + 1) == ["b"]
    write(store, "a", T + 2, Message("urgent", urgent=True))
    assert store.outgoing.due(now=T + 2) == ["a", "b"]


def test_a_send_that_raises_is_retried_with_the_same_key(store: Store) -> None:
    write(store, "a", T, "hello")
    keys: list[str] = []

    def flaky(message: OutgoingMessage) -> None:
        keys.append(message.key)
        raise ConnectionError("channel down")

    with pytest.raises(ConnectionError):
        store.dispatch("a", flaky, now=T)
    assert store.dispatch("a", lambda m: keys.append(m.key), now=T + 1) == 1
    assert keys[0] == keys[1]


def test_a_dispatch_of_many_inboxes_holds_again_only_the_failing_receivers_messages(store: Store) -> None:
    for inbox in ("a", "b", "c"):
        write(store, inbox, T, f"hello {inbox}")
    sent: list[OutgoingMessage] = []

    def send(message: OutgoingMessage) -> None:
        if message.inbox == "b":
            raise ConnectionError("b's receiver is down")
        sent.append(message)

    done = store.outgoing.dispatch_many(["c", "b", "a", "a"], send, now=T)
    assert (done.sent, sorted(done.failed)) == (2, ["b"])
    assert isinstance(done.failed["b"], ConnectionError)
    assert [(m.inbox, m.body) for m in sent] == [("a", "hello a"), ("c", "hello c")]
    assert [r.sent_at for inbox in "abc" for r in store.outbox(inbox)] == [T, None, T]
    [held] = store.outbox("b")
    assert store.dispatch("b", sent.append, now=T + 1) == 1  # at once, under the key it was claimed with
    assert sent[-1].key == held.dispatch_key and store.outbox("b")[0].sent_at == T + 1
    assert store.outgoing.dispatch_many("abc", sent.append, now=T + 2).sent == 0  # nothing sent twice


def test_at_most_once_a_failed_send_of_many_inboxes_is_lost_and_the_others_go(store: Store) -> None:
    for inbox in ("a", "b"):
        write(store, inbox, T, f"hello {inbox}")
    sent: list[str] = []

    def send(message: OutgoingMessage) -> None:
        if message.inbox == "a":
            raise ConnectionError("a's receiver is down")
        sent.append(message.inbox)

    send.delivery = AT_MOST_ONCE  # type: ignore[attr-defined]
    done = store.outgoing.dispatch_many(["a", "b"], send, now=T)
    assert (done.sent, list(done.failed), sent) == (1, ["a"], ["b"])
    assert [r.sent_at for inbox in "ab" for r in store.outbox(inbox)] == [T, T]  # a's never again
    assert store.outgoing.dispatch_many(["a", "b"], send, now=T + 10 * H).sent == 0


def test_a_dispatch_of_many_inboxes_commits_twice_per_hundred_not_per_inbox(store: Store) -> None:
    inboxes = [f"i{n:03}" for n in range(250)]
    for inbox in inboxes:
        write(store, inbox, T, f"hello {inbox}")
    commits: list[int] = []
    event.listen(store.engine, "commit", lambda conn: commits.append(1))
    sent: list[str] = []
    assert store.outgoing.dispatch_many(inboxes, lambda m: sent.append(m.inbox), now=T).sent == 250
    assert sorted(sent) == inboxes
    assert len(commits) == 6  # a claim and a mark for each of 100, 100 and 50 inboxes


CRASHING_DISPATCHER = textwrap.dedent(
    """
    import os, sys
    from store import Store
    store = Store.connect(sys.argv[1])
    def send(message):
        print(message.key, flush=True)
        os._exit(17)  # the channel accepted it; the process dies before marking the rows sent
    if sys.argv[2] == "at-most-once":
        send.delivery = "at-most-once"
    store.dispatch("a", send, now=int(sys.argv[3]))
    """
)


def crash_while_sending(db_url: str, delivery: str, now: int) -> str:
    done = subprocess.run([sys.executable, "-c", CRASHING_DISPATCHER, db_url, delivery, str(now)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 17, done.stderr
    return done.stdout.strip()


def test_at_least_once_resends_after_a_crash_with_the_same_key(make_store, db_url: str) -> None:  # type: ignore[no-untyped-def]
    store = make_store(dispatch_timeout=300)
    write(store, "a", T, "hello")
    key = crash_while_sending(db_url, "at-least-once", T)
    resent: list[OutgoingMessage] = []
    assert store.dispatch("a", resent.append, now=T + 299) == 0  # the claim may still be sending
    assert store.dispatch("a", resent.append, now=T + 300) == 1
    assert [(m.key, m.body) for m in resent] == [(key, "hello")]
    assert store.dispatch("a", resent.append, now=T + 10 * H) == 0


def test_at_most_once_never_resends_after_a_crash(make_store, db_url: str) -> None:  # type: ignore[no-untyped-def]
    store = make_store(dispatch_timeout=300)
    write(store, "a", T, "hello")
    crash_while_sending(db_url, "at-most-once", T)
    resent: list[OutgoingMessage] = []

    def send(message: OutgoingMessage) -> None:
        resent.append(message)

    send.delivery = AT_MOST_ONCE  # type: ignore[attr-defined]
    assert store.dispatch("a", send, now=T + 10 * H) == 0
    assert resent == []
    assert store.outbox("a")[0].sent_at == T
