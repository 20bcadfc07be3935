"""start_next_run: the oldest ready inbox nobody holds, leased and claimed in one transaction."""

from __future__ import annotations

from store import Outcome, RunStart, Store

T = 1_000_000
TTL = 120


def test_the_oldest_ready_inbox_nobody_holds_is_taken(store: Store) -> None:
    store.ingest("hot", "chat", "h-1", {"n": 1}, now=T)
    store.ingest("hot", "chat", "h-2", {"n": 2}, now=T)
    store.ingest("b", "chat", "b-1", {"n": 3}, now=T)  # never woken: no inbox row yet
    store.ingest("c", "chat", "c-1", {"n": 4}, now=T)
    assert store.start_run("hot", "W0", now=T).generation == 1  # hot is held

    inbox, start = store.start_next_run("W1", now=T)
    assert inbox == "b" and [e.source_id for e in start.events] == ["b-1"] and start.generation == 1
    assert store.start_next_run("W2", skip=["c"], now=T) is None  # hot and b are held, c skipped
    inbox, start = store.start_next_run("W2", now=T)
    assert (inbox, [e.source_id for e in start.events]) == ("c", ["c-1"])
    assert store.status("c", now=T).holder == "W2"
    assert store.start_next_run("W3", now=T) is None


def test_events_in_backoff_are_not_ready_and_a_released_inbox_is(store: Store) -> None:
    store.ingest("a", "chat", "a-1", {"n": 1}, now=T)
    inbox, start = store.start_next_run("W", now=T)
    step = store.finish_and_claim(inbox, "W", start.generation, [e.id for e in start.events],
                                  error="boom", now=T)
    assert step.released  # the failed event waits its backoff: nothing claimable now
    assert store.start_next_run("W", now=T + 1) is None
    later = T + 3600
    inbox, start = store.start_next_run("W", now=later)
    assert inbox == "a" and start.events[0].attempts == 2
    assert store.finish_and_claim("a", "W", start.generation, [start.events[0].id], Outcome(), now=later).released


def test_a_doorbell_for_work_already_done_leaves_no_lease(store: Store) -> None:
    store.ingest("a", "chat", "a-1", {"n": 1}, now=T)
    assert store.start_run("a", "W0", now=T).generation == 1
    # W0 is still running; a second doorbell finds it held.
    assert store.start_run("a", "W1", now=T) == RunStart(None, [], {})
    gen = store.status("a").generation
    assert store.finish("a", "W0", gen, [e.id for e in store.events("a")], now=T)
    assert store.release("a", "W0", gen, now=T)
    # Nothing to claim: no lease stays behind, so the next event's doorbell is served at once.
    assert store.start_run("a", "W1", now=T + 1) == RunStart(None, [], {})
    assert store.status("a", now=T + 1).holder is None
    store.ingest("a", "chat", "a-2", {"n": 2}, now=T + 2)
    assert [e.source_id for e in store.start_run("a", "W2", now=T + 2).events] == ["a-2"]


def test_a_finish_that_releases_takes_the_next_inbox_in_its_transaction(store: Store) -> None:
    for inbox in ("a", "b", "c"):
        store.ingest(inbox, "chat", f"{inbox}-1", {"n": 1}, now=T)
    inbox, start = store.start_next_run("W", now=T)
    assert inbox == "a"
    step = store.finish_and_claim("a", "W", start.generation, [e.id for e in start.events],
                                  Outcome(messages=["done a"]), now=T + 1, take_next=["b"])
    assert step.finished and step.released and step.next is not None
    taken, next_start = step.next  # b is skipped: c, leased and claimed in the same commit
    assert taken == "c" and [e.source_id for e in next_start.events] == ["c-1"]
    assert store.status("a", now=T + 1).holder is None and store.status("c", now=T + 1).holder == "W"
    assert [e.status for e in store.events("a")] == ["done"] and store.outbox("a")[0].body == "done a"
    assert store.events("c")[0].attempts == 1

    # A finish that claims a next batch of its own inbox takes nothing; nor does a refused one.
    store.ingest("c", "chat", "c-2", {"n": 2}, now=T + 1)
    more = store.finish_and_claim("c", "W", next_start.generation, [next_start.events[0].id],
                                  now=T + 2, take_next=[])
    assert not more.released and [e.source_id for e in more.events] == ["c-2"] and more.next is None
    stale = store.finish_and_claim("c", "W", next_start.generation - 1, [more.events[0].id],
                                   now=T + 2, take_next=[])
    assert not stale.finished and stale.next is None
    assert store.events("b")[0].status == "pending"  # b was never taken: skipped above
