"""start_next_run: the oldest ready inbox nobody holds, leased and claimed in one transaction."""

from __future__ import annotations

from sqlalchemy import event

from store import Outcome, RunStart, Store

T = 1_000_000
TTL = 120


def test_the_oldest_ready_inbox_nobody_holds_is_taken(store: Store) -> None:
    store.ingest("hot", "chat", "h-1", {"n": 1}, now=T)
    store.ingest("hot", "chat", "h-2", {"n": 2}, now=T)
    store.ingest("b", "chat", "b-1", {"n": 3}, now=T)  # never woken: no inbox row yet
    store.ingest("c", "chat", "c-1", {"n": 4}, now=T)
    assert store.runs.start("hot", "W0", now=T).generation == 1  # hot is held

    inbox, start = store.runs.start_next("W1", now=T)
    assert inbox == "b" and [e.source_id for e in start.events] == ["b-1"] and start.generation == 1
    assert store.runs.start_next("W2", skip=["c"], now=T) is None  # hot and b are held, c skipped
    inbox, start = store.runs.start_next("W2", now=T)
    assert (inbox, [e.source_id for e in start.events]) == ("c", ["c-1"])
    assert store.status("c", now=T).holder == "W2"
    assert store.runs.start_next("W3", now=T) is None


def test_events_in_backoff_are_not_ready_and_a_released_inbox_is(store: Store) -> None:
    store.ingest("a", "chat", "a-1", {"n": 1}, now=T)
    inbox, start = store.runs.start_next("W", now=T)
    step = store.runs.finish_and_claim(inbox, "W", start.generation, [e.id for e in start.events],
                                       error="boom", now=T)
    assert step.released  # the failed event waits its backoff: nothing claimable now
    assert store.runs.start_next("W", now=T + 1) is None
    later = T + 3600
    inbox, start = store.runs.start_next("W", now=later)
    assert inbox == "a" and start.events[0].attempts == 2
    assert store.runs.finish_and_claim("a", "W", start.generation, [start.events[0].id], Outcome(), now=later).released


def test_a_doorbell_for_work_already_done_leaves_no_lease(store: Store) -> None:
    store.ingest("a", "chat", "a-1", {"n": 1}, now=T)
    assert store.runs.start("a", "W0", now=T).generation == 1
    # W0 is still running; a second doorbell finds it held.
    assert store.runs.start("a", "W1", now=T) == RunStart(None, [], {})
    gen = store.status("a").generation
    assert store.finish("a", "W0", gen, [e.id for e in store.events("a")], now=T)
    assert store.release("a", "W0", gen, now=T)
    # Nothing to claim: no lease stays behind, so the next event's doorbell is served at once.
    assert store.runs.start("a", "W1", now=T + 1) == RunStart(None, [], {})
    assert store.status("a", now=T + 1).holder is None
    store.ingest("a", "chat", "a-2", {"n": 2}, now=T + 2)
    assert [e.source_id for e in store.runs.start("a", "W2", now=T + 2).events] == ["a-2"]


def test_a_finish_that_releases_takes_the_next_inbox_in_its_transaction(store: Store) -> None:
    for inbox in ("a", "b", "c"):
        store.ingest(inbox, "chat", f"{inbox}-1", {"n": 1}, now=T)
    inbox, start = store.runs.start_next("W", now=T)
    assert inbox == "a"
    step = store.runs.finish_and_claim("a", "W", start.generation, [e.id for e in start.events],
                                       Outcome(messages=["done a"]), now=T + 1, take_next=["b"])
    assert step.finished and step.released and step.next is not None
    taken, next_start = step.next  # b is skipped: c, leased and claimed in the same commit
    assert taken == "c" and [e.source_id for e in next_start.events] == ["c-1"]
    assert store.status("a", now=T + 1).holder is None and store.status("c", now=T + 1).holder == "W"
    assert [e.status for e in store.events("a")] == ["done"] and store.outbox("a")[0].body == "done a"
    assert store.events("c")[0].attempts == 1

    # A finish that claims a next batch of its own inbox takes nothing; nor does a refused one.
    store.ingest("c", "chat", "c-2", {"n": 2}, now=T + 1)
    more = store.runs.finish_and_claim("c", "W", next_start.generation, [next_start.events[0].id],
                                       now=T + 2, take_next=[])
    assert not more.released and [e.source_id for e in more.events] == ["c-2"] and more.next is None
    stale = store.runs.finish_and_claim("c", "W", next_start.generation - 1, [more.events[0].id],
                                        now=T + 2, take_next=[])
    assert not stale.finished and stale.next is None
    assert store.events("b")[0].status == "pending"  # b was never taken: skipped above


def test_a_release_with_nothing_to_skip_takes_the_next_inbox_in_the_same_statement(store: Store) -> None:
    """``take_next=[]``: on PostgreSQL the statement that resigns also locks the next inbox
    (backlog.LOG_RESIGN_AND_TAKE). Its snapshot sees the released inbox still leased, held
    inboxes are passed over, and an inbox with no row yet is found by the fallback take."""
    store.ingest("a", "chat", "a-1", {"n": 1}, now=T)
    store.ingest("held", "chat", "h-1", {"n": 2}, now=T)
    store.ingest("b", "chat", "b-1", {"n": 3}, now=T)
    store.ingest("c", "chat", "c-1", {"n": 4}, now=T)
    for inbox in ("a", "b", "c"):  # rows for them, released unclaimed: the merged take finds them
        assert store.release(inbox, "setup", store.acquire(inbox, "setup", now=T), now=T, force=True)
    assert store.runs.start("held", "other", now=T).generation == 1
    inbox, start = store.runs.start_next("W", now=T)
    assert inbox == "a"
    store.ingest("a", "chat", "a-2", {"n": 5}, now=T)  # a has work again after its claim

    # Not released (a-2 is claimable): a's next batch, and no other inbox locked.
    step = store.runs.finish_and_claim("a", "W", start.generation, [e.id for e in start.events], now=T + 1, take_next=[])
    assert not step.released and step.next is None and [e.source_id for e in step.events] == ["a-2"]
    assert store.status("b", now=T + 1).holder is None
    # Released: b (the oldest ready inbox nobody holds; "held" is passed over) in the same commit,
    # on PostgreSQL in 3 statements: check-and-done, log-resign-and-take, b's lease and claim.
    sent: list[str] = []

    def count(conn, cursor, statement, *rest) -> None:  # type: ignore[no-untyped-def]
        sent.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    step = store.runs.finish_and_claim("a", "W", start.generation, [e.id for e in step.events], now=T + 2, take_next=[])
    event.remove(store.engine, "before_cursor_execute", count)
    if store.engine.dialect.name == "postgresql":
        assert len(sent) == 3, sent
    assert step.released and step.next is not None
    taken, b = step.next
    assert taken == "b" and [e.source_id for e in b.events] == ["b-1"] and b.generation == 2
    assert store.status("b", now=T + 2).holder == "W" and store.status("a", now=T + 2).holder is None
    assert [list(r.event_ids) for r in store.operator.run_log("a")][-1] == [e.id for e in store.events("a")][-1:]

    # "new" has never been woken (no inbox row): the merged take cannot see it, the fallback can.
    store.ingest("new", "chat", "n-1", {"n": 6}, now=T + 2)
    step = store.runs.finish_and_claim("b", "W", b.generation, [e.id for e in b.events], now=T + 3, take_next=[])
    assert step.next is not None and step.next[0] == "c"
    c = step.next[1]
    step = store.runs.finish_and_claim("c", "W", c.generation, [e.id for e in c.events], now=T + 4, take_next=[])
    assert step.next is not None and step.next[0] == "new"
    last = step.next[1]
    step = store.runs.finish_and_claim("new", "W", last.generation, [e.id for e in last.events], now=T + 5, take_next=[])
    assert step.released and step.next is None  # only "held" is left, and it is held
    assert {e.source_id: e.status for e in store.events("held")} == {"h-1": "running"}
