"""Real concurrency on PostgreSQL: threads racing through the store, invariants counted after.

Each test runs the racing calls in threads with their own pooled connections, on the
database's clock where the rule is about time (leases), and on fixed times where the rule is
about ordering (timers, approvals, the outbox gap). Afterwards it counts what must be zero.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sql

from store import Outcome, OutgoingMessage, Store

T = 1_000_000


@pytest.fixture
def pg_store(pg_url: str):  # type: ignore[no-untyped-def]
    opened: list[Store] = []

    def make(**settings: object) -> Store:
        store = Store.connect(pg_url, pool_size=12, **settings)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.dispose()


def race(n: int, work: Callable[[int], object]) -> list[object]:
    """Run ``work(i)`` in ``n`` threads released together by a barrier."""
    barrier = threading.Barrier(n)

    def go(i: int) -> object:
        barrier.wait()
        return work(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(go, range(n)))


def test_eight_workers_with_stalls_past_the_ttl_finish_every_event_exactly_once(pg_store) -> None:  # type: ignore[no-untyped-def]
    store = pg_store(lease_ttl=1, max_attempts=50)
    inbox, total = "hot", 200
    accepted: list[tuple[str, int, list[int]]] = []
    refused: list[tuple[str, int]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def producer() -> None:
        for n in range(total):
            store.ingest(inbox, "chat", f"m-{n}", {"n": n})
            time.sleep(0.01)

    def worker(i: int) -> None:
        rng = random.Random(i)
        holder = f"W{i}"
        stalled_once = i != 0  # W0 always stalls once, so a stale finish is sure to happen
        while not stop.is_set():
            gen = store.acquire(inbox, holder)
            if gen is None:
                time.sleep(0.005)
                continue
            batch = store.claim(inbox, holder, gen)
            if batch and (not stalled_once or rng.random() < 0.05):
                stalled_once = True
                time.sleep(2.2)  # past the lease: another worker takes over
            ids = [e.id for e in batch]
            ok = store.finish(inbox, holder, gen, ids, Outcome(messages=[f"{holder}:{gen}:{ids}"]))
            with lock:
                (accepted.append((holder, gen, ids)) if ok else refused.append((holder, gen)))
            if ok and not batch:
                store.release(inbox, holder, gen)

    feeding = threading.Thread(target=producer)
    feeding.start()
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(worker, i) for i in range(8)]
        feeding.join()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(e.status == "done" for e in store.events(inbox)):
                break
            time.sleep(0.1)
        stop.set()
        for f in futures:
            f.result()

    events = store.events(inbox)
    done_counts = Counter(i for _, _, ids in accepted for i in ids)
    assert len(events) == total
    assert [e for e in events if e.status != "done"] == []  # nothing lost
    assert [i for i, n in done_counts.items() if n > 1] == []  # nothing done twice
    assert set(done_counts) == {e.id for e in events}
    assert refused, "no stale finish happened: the test did not exercise fencing"
    assert len(store.outbox(inbox)) == len(accepted)  # messages only from accepted completions
    holders_per_generation: dict[int, set[str]] = {}
    for run in store.operator.run_log(inbox, limit=100_000):
        holders_per_generation.setdefault(run.generation, set()).add(run.holder)
    assert {g: h for g, h in holders_per_generation.items() if len(h) > 1} == {}
    assert store.operator.counters()["stale_finishes_refused"] == len(refused)


def test_eight_threads_ingesting_one_key_store_one_row(pg_store) -> None:  # type: ignore[no-untyped-def]
    store = pg_store()
    for round_ in range(5):
        results = race(8, lambda i: store.ingest("a", "github", f"d-{round_}", {"from": i}))
        assert results.count(True) == 1 and results.count(False) == 7
    assert len(store.events("a")) == 5


def test_two_schedulers_racing_fire_each_occurrence_once(pg_store) -> None:  # type: ignore[no-untyped-def]
    store = pg_store()
    for n in range(1000):
        store.add_timer(f"inbox-{n % 50}", f"t{n}", T, {}, every=3600)
    fired = race(2, lambda i: store.run_scheduler(now=T + 10, limit=50))
    all_fired = [f for batch in fired for f in batch]
    assert len(all_fired) == 1000 and all(f.stored for f in all_fired)
    assert len({(f.inbox, f.timer_id) for f in all_fired}) == 1000
    assert all(fired), "one scheduler did all the work: the race did not happen"
    with store.engine.connect() as conn:
        from sqlalchemy import func, select

        from store.tables import events

        assert conn.execute(select(func.count()).select_from(events)).scalar() == 1000


def test_answers_racing_the_expiry_scan_at_the_deadline_agree_on_one_outcome(pg_store) -> None:  # type: ignore[no-untyped-def]
    store = pg_store()
    deadline = T + 3600
    requests = [f"r{n}" for n in range(40)]
    for r in requests:
        store.request_approval("a", r, f"refund {r}", 3600, now=T)

    def act(i: int) -> object:
        if i == 0:
            return store.run_scheduler(now=deadline)
        offset = (-1, 0, 1)[i % 3]  # answers at the deadline - 1 s, at it, and 1 s after
        return [(r, store.answer_approval("a", r, "yes", now=deadline + offset)) for r in requests]

    results = race(7, act)
    stored = {e.source_id: e.payload["answer"] for e in store.events("a")}
    assert sorted(stored) == sorted(requests)  # exactly one event per request
    told = [(r, answer) for batch in results[1:] for r, answer in batch]
    assert [(r, a) for r, a in told if a != stored[r]] == []  # every caller told the one that stands
    assert {a for _, a in told if a != "expired"} <= {"yes"}


def test_two_dispatchers_never_send_a_message_twice_and_hold_the_gap(pg_store) -> None:  # type: ignore[no-untyped-def]
    gap = 60
    store = pg_store(outbox_gap=gap)
    sends: list[tuple[int, OutgoingMessage]] = []
    lock = threading.Lock()
    now = T
    for step in range(40):
        now = T + step * 20
        store.ingest("a", "chat", f"m-{step}", {}, now=now)
        gen = store.acquire("a", "W", now=now)
        batch = store.claim("a", "W", gen, now=now)
        store.finish("a", "W", gen, [e.id for e in batch], Outcome(messages=[f"update {step}"]), now=now)

        def dispatch(i: int, at: int = now) -> int:
            def send(message: OutgoingMessage) -> None:
                with lock:
                    sends.append((at, message))
            return store.dispatch("a", send, now=at)

        race(2, dispatch)
    sent_ids = Counter(i for _, m in sends for i in m.message_ids)
    assert [i for i, n in sent_ids.items() if n > 1] == []
    times = [at for at, _ in sends]
    assert all(b - a >= gap for a, b in zip(times, times[1:]))
    assert len(sent_ids) == len([m for m in store.outbox("a") if m.sent_at is not None])


def test_a_stuck_transaction_on_an_inbox_makes_acquire_say_held_not_wait(pg_store) -> None:  # type: ignore[no-untyped-def]
    """A process paused inside a store transaction keeps the inbox row locked: another
    worker's acquire gives up after lock_timeout and answers "held" (the sweep rings again)
    instead of stalling until PostgreSQL ends the paused session."""
    from sqlalchemy import text

    store = pg_store(lock_timeout=1)
    store.ingest("stuck", "chat", "m-1", {})
    assert store.acquire("stuck", "A") == 1
    with store.engine.connect() as paused:
        paused.execute(text("SELECT 1 FROM inboxes WHERE inbox = 'stuck' FOR UPDATE"))
        assert store.acquire("stuck", "B") is None
        assert store.runs.start("stuck", "B").generation is None
        assert store.acquire("other", "B") == 1  # other inboxes never wait on this one
    assert store.renew("stuck", "A", 1) is True  # the lock is gone with the transaction


def cut_connections(store: Store) -> None:
    """Every other session of this store's database ends, as in a restart or a failover."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    admin_engine = create_engine(store.engine.url, poolclass=NullPool)  # not one of the store's
    with admin_engine.connect() as admin:
        admin.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE application_name = 'wakeful' AND pid <> pg_backend_pid() "
                           "AND datname = current_database()"))
        admin.commit()
    admin_engine.dispose()


def test_a_pinned_connection_lost_mid_task_is_replaced_at_the_next_call(pg_store) -> None:  # type: ignore[no-untyped-def]
    """A database restart between two calls of a task: the call that meets the dead
    connection fails (and changes nothing), the next one gets a fresh connection."""
    from sqlalchemy.exc import DBAPIError

    store = pg_store()
    store.ingest("a", "chat", "m-1", {})
    with store.transactions.pinned():
        start = store.runs.start("a", "A")
        cut_connections(store)
        with pytest.raises(DBAPIError):
            store.runs.finish_and_claim("a", "A", start.generation, [e.id for e in start.events])
        step = store.runs.finish_and_claim("a", "A", start.generation, [e.id for e in start.events])
    assert step.finished and step.released


def test_a_pinned_connection_idle_past_the_threshold_is_checked_again(pg_store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """After an agent's long step the next call checks a connection out again (pre-ping
    included): a restart during the step costs nothing."""
    import store.transactions

    monkeypatch.setattr(store.transactions, "PINNED_IDLE_SECONDS", 0.0)
    s = pg_store()
    s.ingest("a", "chat", "m-1", {})
    with s.transactions.pinned():
        start = s.runs.start("a", "A")
        cut_connections(s)
        step = s.runs.finish_and_claim("a", "A", start.generation, [e.id for e in start.events])
    assert step.finished and step.released


def test_a_connection_killed_moments_after_its_last_use_is_replaced_at_checkout(pg_store) -> None:  # type: ignore[no-untyped-def]
    """Why every checkout is pinged: a restart right after a call (under load, every
    restart is) must cost the next call nothing. A ping skipped for a connection used
    within the last second made this ingest fail (the fault scenario of connections killed
    under load caught it), and a webhook that gets a 5xx is not always sent again."""
    s = pg_store()
    s.ingest("a", "chat", "m-1", {})
    cut_connections(s)
    assert s.ingest("a", "chat", "m-2", {}) is True
    assert [e.source_id for e in s.events("a")] == ["m-1", "m-2"]


def test_an_ingest_is_one_autocommit_statement_and_durable_at_return(pg_store) -> None:  # type: ignore[no-untyped-def]
    """No BEGIN and COMMIT round trips around the ingest's one INSERT on PostgreSQL: the
    statement commits itself, and another session sees the event as soon as ingest returns."""
    from sqlalchemy import event, text

    store = pg_store()
    sent: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda c, cur, st, *a: sent.append(st.split()[0]))
    commits = [0]
    event.listen(store.engine, "commit", lambda conn: commits.__setitem__(0, commits[0] + 1))
    assert store.ingest("a", "chat", "m-1", {"text": "hi"}) is True
    assert store.ingest("a", "chat", "m-1", {"text": "hi"}) is False
    assert sent == ["INSERT", "INSERT"] and commits[0] == 0
    with store.engine.connect() as other:
        assert other.execute(text("SELECT count(*) FROM events WHERE inbox = 'a'")).scalar() == 1


def test_takeovers_of_different_inboxes_never_wait_for_each_other(pg_store) -> None:  # type: ignore[no-untyped-def]
    """A takeover counts itself on its own inbox's row: while one takeover's transaction is
    still open, a takeover of another inbox goes through (a shared counters row would make it
    wait for that lock, and give up after lock_timeout with None)."""
    from store import steps

    store = pg_store(lock_timeout=1)
    for inbox in ("a", "b"):
        assert store.acquire(inbox, "W0", now=T) == 1
    with store.transactions.transaction() as conn:
        got = steps.acquire(conn, store.settings, "a", "W1", T + 1000)  # open, uncommitted
        assert got.took_over and got.generation == 2
        assert store.acquire("b", "W2", now=T + 1000) == 2
    assert store.operator.counters()["lease_takeovers"] == 2


def test_takers_of_the_backlog_never_take_one_inbox_twice(pg_store) -> None:  # type: ignore[no-untyped-def]
    """Eight workers drain 60 inboxes straight from the database at once: each inbox is taken
    by exactly one of them, every event done once, none left behind."""
    store = pg_store()
    store.intake.ingest_many([(f"i{n}", "chat", f"m-{n}", {"n": n}) for n in range(60)])
    taken: list[tuple[str, int]] = []
    lock = threading.Lock()

    def drain(i: int) -> None:
        while True:
            got = store.runs.start_next(f"W{i}")
            if got is None:
                if not any(e.status == "pending" for n in range(60) for e in store.events(f"i{n}")):
                    return
                continue
            inbox, start = got
            with lock:
                taken.append((inbox, start.generation))
            step = store.runs.finish_and_claim(inbox, f"W{i}", start.generation, [e.id for e in start.events],
                                               Outcome(messages=["ok"]))
            assert step.finished and step.released

    race(8, drain)
    assert Counter(inbox for inbox, _ in taken) == Counter(f"i{n}" for n in range(60))
    assert all(e.status == "done" and e.attempts == 1 for n in range(60) for e in store.events(f"i{n}"))


def test_takers_racing_through_a_backlog_give_up_only_when_nothing_is_left_to_take(pg_store) -> None:  # type: ignore[no-untyped-def]
    """A dense worker's drains all take from the backlog at once: a take that finds every
    candidate locked by another taker looks past them instead of answering "nothing ready",
    which ended those drains with the backlog still full (left to the sweep)."""
    store = pg_store()
    takers, total = 12, 400  # as many as the pool has connections
    store.intake.ingest_many([(f"b{n}", "chat", "1", {"n": n}) for n in range(total)])
    ready_unheld = sql.text(
        "SELECT count(DISTINCT e.inbox) FROM events e WHERE e.status = 'pending' AND NOT EXISTS "
        "(SELECT 1 FROM inboxes i WHERE i.inbox = e.inbox AND i.lease_until >= "
        "floor(extract(epoch FROM clock_timestamp())))")
    taken: list[str] = []
    left_when_giving_up: list[int] = []

    def take(i: int) -> None:
        while (got := store.runs.start_next(f"T{i}")) is not None:
            taken.append(got[0])
        with store.engine.connect() as conn:
            left_when_giving_up.append(conn.execute(ready_unheld).scalar_one())

    race(takers, take)
    assert sorted(taken) == sorted(f"b{n}" for n in range(total))  # each taken once
    # Inboxes still ready when a taker gave up: at most those other takers were locking
    # at that moment (one each), never the backlog itself.
    assert max(left_when_giving_up) < takers, left_when_giving_up
