"""acquire / renew / release / claim / finish: the fenced lease and the rules of a run."""

from __future__ import annotations

import pytest

from store import ApprovalRequest, Message, Outcome, RunStart, RunStep, Store, Timer

T = 1_000_000
TTL = 120


def fill(store: Store, inbox: str, *ids: str, now: int = T) -> None:
    for source_id in ids:
        store.ingest(inbox, "chat", source_id, {"text": source_id}, now=now)


def statuses(store: Store, inbox: str) -> dict[str, tuple[str, int]]:
    return {e.source_id: (e.status, e.attempts) for e in store.events(inbox)}


# -- acquire / renew / release -------------------------------------------------------------

def test_acquire_renewal_keeps_the_generation_and_takeover_bumps_it(store: Store) -> None:
    assert store.acquire("a", "A", now=T) == 1
    assert store.acquire("a", "A", now=T + 100) == 1  # renewal by the live holder
    assert store.acquire("a", "B", now=T + 100) is None  # held by someone else
    assert store.acquire("a", "B", now=T + 100 + TTL + 1) == 2  # takeover of an expired lease
    assert store.acquire("a", "B", now=T + 100 + 3 * TTL) == 3  # the same holder after expiry: +1


def test_the_lease_is_live_through_its_last_second(store: Store) -> None:
    assert store.acquire("a", "A", now=T) == 1
    assert store.acquire("a", "B", now=T + TTL) is None
    assert store.acquire("a", "B", now=T + TTL + 1) == 2


def test_leases_are_per_inbox(store: Store) -> None:
    assert store.acquire("a", "A", now=T) == 1
    assert store.acquire("b", "B", now=T) == 1


def test_renew_extends_only_the_live_holder(store: Store) -> None:
    gen = store.acquire("a", "A", now=T)
    assert store.renew("a", "A", gen, now=T + 100) is True
    assert store.acquire("a", "B", now=T + 100 + TTL) is None  # renewed: still live
    assert store.renew("a", "A", gen + 1, now=T + 101) is False  # wrong generation
    assert store.renew("a", "B", gen, now=T + 101) is False  # wrong holder
    assert store.renew("a", "A", gen, now=T + 100 + TTL + 1) is False  # expired: fenced
    assert store.renew("nobody", "A", 1, now=T) is False


def test_release_refuses_while_claimable_events_remain(store: Store) -> None:
    gen = store.acquire("a", "A", now=T)
    fill(store, "a", "m-1")  # arrives after the holder's last claim: its doorbell found the lease held
    assert store.release("a", "A", gen, now=T + 1) is False
    assert store.acquire("a", "B", now=T + 1) is None  # the lease was kept
    batch = store.claim("a", "A", gen, now=T + 2)
    assert store.finish("a", "A", gen, [e.id for e in batch], now=T + 2)
    assert store.release("a", "A", gen, now=T + 3) is True
    assert store.acquire("a", "A", now=T + 4) == gen + 1  # a released lease is taken over: +1


def test_release_is_fenced(store: Store) -> None:
    gen = store.acquire("a", "A", now=T)
    assert store.release("a", "A", gen, now=T + TTL + 1) is False
    assert store.release("a", "B", gen, now=T) is False


def test_database_clock_decides_the_lease(store: Store) -> None:
    """now=None: the lease is stamped and judged on the database's clock, never the caller's."""
    assert store.acquire("a", "A") == 1
    assert store.acquire("a", "B") is None
    status = store.status("a")
    assert status.holder == "A"
    assert TTL - 5 <= status.lease_expires_in <= TTL
    # A caller whose clock says the lease lapsed long ago cannot take it: None is the database.
    assert store.acquire("a", "B", now=None) is None


# -- claim ------------------------------------------------------------------------------------

def test_claim_takes_every_pending_event_oldest_first_and_counts_the_attempt(store: Store) -> None:
    fill(store, "a", "m-1", "m-2", "m-3")
    gen = store.acquire("a", "A", now=T)
    batch = store.claim("a", "A", gen, now=T)
    assert [(e.source_id, e.status, e.attempts, e.claim_gen) for e in batch] == [
        ("m-1", "running", 1, gen), ("m-2", "running", 1, gen), ("m-3", "running", 1, gen)]
    assert store.claim("a", "A", gen, now=T) == []  # nothing left pending


def test_batch_limit_bounds_a_claim(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(batch_limit=2)
    fill(store, "a", "m-1", "m-2", "m-3")
    gen = store.acquire("a", "A", now=T)
    first = store.claim("a", "A", gen, now=T)
    assert [e.source_id for e in first] == ["m-1", "m-2"]
    assert store.finish("a", "A", gen, [e.id for e in first], now=T)
    assert [e.source_id for e in store.claim("a", "A", gen, now=T)] == ["m-3"]


def test_claim_is_fenced(store: Store) -> None:
    fill(store, "a", "m-1")
    gen = store.acquire("a", "A", now=T)
    assert store.claim("a", "B", gen, now=T) == []
    assert store.claim("a", "A", gen + 1, now=T) == []
    assert store.claim("a", "A", gen, now=T + TTL + 1) == []
    assert statuses(store, "a") == {"m-1": ("pending", 0)}


def test_claims_never_cross_inboxes(store: Store) -> None:
    fill(store, "a", "m-1")
    fill(store, "b", "m-2")
    gen = store.acquire("a", "A", now=T)
    assert [e.source_id for e in store.claim("a", "A", gen, now=T)] == ["m-1"]
    assert statuses(store, "b") == {"m-2": ("pending", 0)}


def test_an_older_generations_running_rows_are_retried_alone(store: Store) -> None:
    fill(store, "a", "poison", "healthy")
    gen1 = store.acquire("a", "W0", now=T)
    store.claim("a", "W0", gen1, now=T)  # W0 dies without finishing
    fill(store, "a", "later", now=T + 1)
    gen2 = store.acquire("a", "W1", now=T + TTL + 1)
    assert gen2 == gen1 + 1
    retried = store.claim("a", "W1", gen2, now=T + TTL + 1)
    assert [(e.source_id, e.attempts) for e in retried] == [("poison", 2)]
    assert statuses(store, "a")["healthy"] == ("pending", 1)


def test_an_event_claimed_max_attempts_times_is_parked_dead(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(max_attempts=2)
    fill(store, "a", "poison")
    now = T
    for _ in range(2):
        gen = store.acquire("a", "W", now=now)
        assert [e.source_id for e in store.claim("a", "W", gen, now=now)] == ["poison"]
        now += TTL + 1  # crash: no finish
    gen = store.acquire("a", "W", now=now)
    assert store.claim("a", "W", gen, now=now) == []
    [dead] = store.dead("a")
    assert (dead.source_id, dead.status, dead.attempts) == ("poison", "dead", 2)
    assert "too many attempts" in dead.error
    assert store.release("a", "W", gen, now=now) is True


def test_rows_an_older_generation_left_running_are_recovered_by_the_next_claim(store: Store) -> None:
    """The claim itself puts them right, whatever came before it: the lapsed holder's rows
    are ready again (the attempt it spent stays counted), the oldest claimed alone."""
    fill(store, "a", "m-1", "m-2")
    gen1 = store.acquire("a", "W0", now=T)
    store.claim("a", "W0", gen1, now=T)  # W0 stalls
    gen2 = store.acquire("a", "W1", now=T + TTL + 1)
    assert gen2 == gen1 + 1 and statuses(store, "a") == {"m-1": ("running", 1), "m-2": ("running", 1)}
    assert store.release("a", "W1", gen2, now=T + TTL + 1) is False  # they are claimable work
    [retried] = store.claim("a", "W1", gen2, now=T + TTL + 1)
    assert (retried.source_id, retried.attempts, retried.claim_gen) == ("m-1", 2, gen2)
    assert statuses(store, "a") == {"m-1": ("running", 2), "m-2": ("pending", 1)}
    assert store.operator.counters()["lease_takeovers"] == 1


def test_rows_left_running_are_recovered_after_a_release_too(store: Store) -> None:
    """No takeover needed: a holder that released with rows of an older generation still
    running (it never claimed) hands them to the next generation's first claim."""
    fill(store, "a", "m-1")
    gen1 = store.acquire("a", "W0", now=T)
    store.claim("a", "W0", gen1, now=T)
    gen2 = store.acquire("a", "W1", now=T + TTL + 1)
    assert store.release("a", "W1", gen2, now=T + TTL + 1, force=True)
    gen3 = store.acquire("a", "W2", now=T + TTL + 2)
    assert [(e.source_id, e.attempts, e.claim_gen) for e in store.claim("a", "W2", gen3, now=T + TTL + 2)] == [
        ("m-1", 2, gen3)]


def test_a_claim_parks_rows_at_the_cap_dead_whoever_left_them(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(max_attempts=1)
    fill(store, "a", "m-1", "m-2")
    gen1 = store.acquire("a", "W0", now=T)
    assert len(store.claim("a", "W0", gen1, now=T)) == 2  # W0 crashes: both at the cap
    gen2 = store.acquire("a", "W1", now=T + TTL + 1)
    fill(store, "a", "m-3", now=T + TTL + 1)
    assert [e.source_id for e in store.claim("a", "W1", gen2, now=T + TTL + 1)] == ["m-3"]
    assert statuses(store, "a") == {"m-1": ("dead", 1), "m-2": ("dead", 1), "m-3": ("running", 1)}
    assert store.dead("a")[0].error == "too many attempts: claimed 1 times without a finish"


def test_a_retried_finish_and_claim_gets_the_batch_its_lost_reply_carried(store: Store) -> None:
    """The first call commits (m-1 done, m-2 claimed) and its reply is lost; the retry finds
    nothing to finish and must neither resign nor strand m-2: it returns m-2 as claimed, with
    no second attempt, and the lease stays with its holder."""
    fill(store, "a", "m-1")
    start = store.runs.start("a", "A", now=T)
    fill(store, "a", "m-2", now=T + 1)
    ids = [e.id for e in start.events]
    first = store.runs.finish_and_claim("a", "A", start.generation, ids, Outcome(messages=["one"]), now=T + 2)
    retry = store.runs.finish_and_claim("a", "A", start.generation, ids, Outcome(messages=["one"]), now=T + 3)
    assert [e.id for e in retry.events] == [e.id for e in first.events]
    assert (retry.finished, retry.released) == (True, False)
    assert statuses(store, "a") == {"m-1": ("done", 1), "m-2": ("running", 1)}
    assert [m.body for m in store.outbox("a")] == ["one"] and len(store.operator.run_log("a")) == 1
    assert store.acquire("a", "B", now=T + 3) is None  # still held
    last = store.runs.finish_and_claim("a", "A", start.generation, [e.id for e in retry.events], now=T + 4)
    assert last.finished and last.released and statuses(store, "a")["m-2"] == ("done", 1)


def test_a_retried_finish_and_claim_with_nothing_claimed_after_it_resigns(store: Store) -> None:
    fill(store, "a", "m-1")
    start = store.runs.start("a", "A", now=T)
    ids = [e.id for e in start.events]
    assert store.runs.finish_and_claim("a", "A", start.generation, ids, now=T + 1).released
    # The retry of a call that released: the lease is gone, so it is fenced and writes nothing.
    assert store.runs.finish_and_claim("a", "A", start.generation, ids, now=T + 1) == RunStep(False, [], False)


# -- finish -----------------------------------------------------------------------------------

def run_once(store: Store, inbox: str, holder: str, now: int, outcome: Outcome | None = None) -> list:
    gen = store.acquire(inbox, holder, now=now)
    batch = store.claim(inbox, holder, gen, now=now)
    assert store.finish(inbox, holder, gen, [e.id for e in batch], outcome, now=now)
    return batch


def test_finish_applies_the_whole_outcome_in_one_transaction(store: Store) -> None:
    fill(store, "a", "m-1")
    outcome = Outcome(
        messages=["plain", Message("now!", urgent=True)],
        approvals=[ApprovalRequest("refund-1", "refund order 1", 3600)],
        timers=[Timer("follow-up", {"why": "check back"}, after=600),
                Timer("daily", {"task": "digest"}, cron="0 9 * * *", tz="Europe/Berlin")],
        memory={"name": "Alice", "prefs": {"tone": "short"}},
    )
    run_once(store, "a", "A", T, outcome)
    assert [(m.body, m.urgent, m.created, m.sent_at) for m in store.outbox("a")] == [
        ("plain", False, T, None), ("now!", True, T, None)]
    timers = {t.id: t for t in store.timers("a")}
    assert timers["follow-up"].due == T + 600
    assert timers["approval:refund-1"].due == T + 3600
    assert timers["daily"].cron == "0 9 * * *" and timers["daily"].due > T
    assert store.approvals.view("a")[0].request_id == "refund-1"
    assert store.runs.memory("a") == {"name": "Alice", "prefs": {"tone": "short"}}
    [run] = store.operator.run_log("a")
    assert (run.holder, run.generation, run.outcome, len(run.event_ids)) == ("A", 1, "done", 1)
    fill(store, "a", "m-2", now=T + 1)
    run_once(store, "a", "A", T + 1, Outcome(memory={"name": None, "prefs": {"tone": "long"}}))
    assert store.runs.memory("a") == {"prefs": {"tone": "long"}}


def test_a_finish_writes_all_its_memory_keys_in_one_statement(store: Store) -> None:
    """The claude agent writes three keys a run: one execute for them, inserted or
    overwritten, beside a key deleted in the same finish."""
    from sqlalchemy import event

    fill(store, "a", "m-1")
    run_once(store, "a", "A", T, Outcome(memory={"old": 1, "convo": [1], "log": "x"}))
    memory_writes: list[str] = []

    def seen(_conn, _cursor, statement, *_args) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO MEMORY"):
            memory_writes.append(statement)

    event.listen(store.engine, "before_cursor_execute", seen)
    try:
        fill(store, "a", "m-2", now=T + 1)
        run_once(store, "a", "A", T + 1, Outcome(memory={"old": None, "convo": [1, 2], "log": "y",
                                                         "totals": {"in": 3}}))
    finally:
        event.remove(store.engine, "before_cursor_execute", seen)
    assert len(memory_writes) == 1
    assert store.runs.memory("a") == {"convo": [1, 2], "log": "y", "totals": {"in": 3}}


def test_a_run_gets_the_memory_with_its_batch(store: Store) -> None:
    """start_run and finish_and_claim read the memory in the claim's transaction: a second
    run sees what the first one wrote, with no read of its own."""
    fill(store, "a", "m-1")
    run_once(store, "a", "A", T, Outcome(memory={"name": "Alice"}))
    fill(store, "a", "m-2", "m-3", now=T + 1)
    start = store.runs.start("a", "A", now=T + 1)  # run_once kept the lease: a renewal
    assert [e.source_id for e in start.events] == ["m-2", "m-3"] and start.memory == {"name": "Alice"}
    fill(store, "a", "m-4", now=T + 2)
    step = store.runs.finish_and_claim("a", "A", start.generation, [e.id for e in start.events],
                                       Outcome(memory={"name": None, "tone": "short"}), now=T + 2)
    assert [e.source_id for e in step.events] == ["m-4"] and step.memory == {"tone": "short"}
    last = store.runs.finish_and_claim("a", "A", start.generation, [e.id for e in step.events], now=T + 3)
    assert last.released and last.memory == {}  # no batch, no read


def test_a_fenced_finish_writes_nothing(store: Store) -> None:
    fill(store, "a", "m-1")
    gen_a = store.acquire("a", "A", now=T)
    stale = store.claim("a", "A", gen_a, now=T)
    gen_b = store.acquire("a", "B", now=T + TTL + 1)
    store.claim("a", "B", gen_b, now=T + TTL + 1)
    everything = Outcome(messages=["late"], approvals=[ApprovalRequest("r", "x", 60)],
                         timers=[Timer("t", {}, after=5)], memory={"k": 1})
    assert store.finish("a", "A", gen_a, [e.id for e in stale], everything, now=T + TTL + 2) is False
    assert store.outbox("a") == [] and store.timers("a") == [] and store.runs.memory("a") == {}
    assert store.approvals.view("a") == [] and store.operator.run_log("a") == []
    assert statuses(store, "a") == {"m-1": ("running", 2)}
    assert store.operator.counters()["stale_finishes_refused"] == 1
    assert store.operator.counters()["lease_takeovers"] == 1


@pytest.mark.parametrize("finish", ["finish", "finish_and_claim"])
def test_a_finish_past_its_lease_is_refused_though_nobody_took_over(store: Store, finish: str) -> None:
    """The lease lapsed and no one took the inbox: the run's rows are still `running` under
    its generation, so only the lease check (in the same statement as the done-marking, on
    PostgreSQL) stands between a stalled worker and a late finish."""
    fill(store, "a", "m-1")
    start = store.runs.start("a", "A", now=T)
    ids = [e.id for e in start.events]
    finishing = store.finish if finish == "finish" else store.runs.finish_and_claim
    late = finishing("a", "A", start.generation, ids, Outcome(messages=["late"]), now=T + TTL + 1)
    assert (late if finish == "finish" else late.finished) is False
    assert store.outbox("a") == [] and store.operator.run_log("a") == []
    assert statuses(store, "a") == {"m-1": ("running", 1)}
    assert store.operator.counters()["stale_finishes_refused"] == 1
    # The same holder back with a new generation: the old generation's finish is refused too.
    again = store.runs.start("a", "A", now=T + TTL + 2)
    assert again.generation == start.generation + 1
    late = finishing("a", "A", start.generation, ids, now=T + TTL + 3)
    assert (late if finish == "finish" else late.finished) is False
    assert statuses(store, "a") == {"m-1": ("running", 2)}
    assert store.operator.counters()["stale_finishes_refused"] == 2


def test_a_retried_finish_is_refused_and_writes_nothing_twice(store: Store) -> None:
    fill(store, "a", "m-1")
    gen = store.acquire("a", "A", now=T)
    batch = store.claim("a", "A", gen, now=T)
    ids = [e.id for e in batch]
    assert store.finish("a", "A", gen, ids, Outcome(messages=["once"]), now=T) is True
    assert store.finish("a", "A", gen, ids, Outcome(messages=["once"]), now=T) is False
    assert [m.body for m in store.outbox("a")] == ["once"]


def test_an_empty_run_finishes(store: Store) -> None:
    gen = store.acquire("a", "A", now=T)
    assert store.claim("a", "A", gen, now=T) == []
    assert store.finish("a", "A", gen, [], now=T) is True


def test_an_error_backs_off_exponentially_then_parks_dead(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(max_attempts=4, backoff_base=10, backoff_max=25, lease_ttl=1000)
    fill(store, "a", "flaky")
    gen = store.acquire("a", "A", now=T)
    now = T
    for attempt, delay in ((1, 10), (2, 20), (3, 25)):
        [event] = store.claim("a", "A", gen, now=now)
        assert event.attempts == attempt
        assert store.finish("a", "A", gen, [event.id], Outcome(messages=["never"]), error="boom", now=now)
        assert statuses(store, "a") == {"flaky": ("pending", attempt)}
        assert store.claim("a", "A", gen, now=now + delay - 1) == []  # still backing off
        assert store.release("a", "A", gen, now=now) is True  # a backing-off event is not claimable
        gen = store.acquire("a", "A", now=now + delay)
        now += delay
    [event] = store.claim("a", "A", gen, now=now)
    assert store.finish("a", "A", gen, [event.id], error="boom again", now=now)
    [dead] = store.dead("a")
    assert (dead.attempts, dead.error) == (4, "boom again")
    assert store.outbox("a") == []  # a failed run says nothing
    assert [r.outcome for r in store.operator.run_log("a")] == ["error"] * 4


def test_a_backing_off_event_does_not_block_fresh_ones(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(backoff_base=60)
    fill(store, "a", "flaky")
    gen = store.acquire("a", "A", now=T)
    [event] = store.claim("a", "A", gen, now=T)
    store.finish("a", "A", gen, [event.id], error="rate limited", now=T)
    fill(store, "a", "fresh", now=T + 1)
    assert [e.source_id for e in store.claim("a", "A", gen, now=T + 1)] == ["fresh"]


def test_a_bad_outcome_rolls_the_whole_finish_back(store: Store) -> None:
    fill(store, "a", "m-1")
    gen = store.acquire("a", "A", now=T)
    batch = store.claim("a", "A", gen, now=T)
    bad = Outcome(messages=["fine"], timers=[Timer("t", {}, cron="not a cron")])
    with pytest.raises(ValueError, match="cron expression 'not a cron' is not valid"):
        store.finish("a", "A", gen, [e.id for e in batch], bad, now=T)
    assert store.outbox("a") == []
    assert statuses(store, "a") == {"m-1": ("running", 1)}
    assert store.finish("a", "A", gen, [e.id for e in batch], error="bad outcome", now=T)


# -- the combined steps a worker uses: one commit to start, one per batch after -------------

def count_commits(store: Store) -> list[int]:
    from sqlalchemy import event

    commits = [0]
    event.listen(store.engine, "commit", lambda conn: commits.__setitem__(0, commits[0] + 1))
    return commits


def test_a_wake_with_one_batch_costs_two_commits(store: Store) -> None:
    fill(store, "a", "m-1", "m-2")
    commits = count_commits(store)
    start = store.runs.start("a", "A", now=T)
    gen, batch = start.generation, start.events
    assert gen == 1 and [e.source_id for e in batch] == ["m-1", "m-2"] and start.memory == {}
    step = store.runs.finish_and_claim("a", "A", gen, [e.id for e in batch], Outcome(messages=["ok"]), now=T + 1)
    assert (step.finished, step.events, step.released) == (True, [], True)
    assert commits[0] == 2
    assert statuses(store, "a") == {"m-1": ("done", 1), "m-2": ("done", 1)}
    assert store.acquire("a", "B", now=T + 2) == 2  # released: taken over at once


def test_a_pinned_block_checks_out_one_connection(store: Store) -> None:
    from sqlalchemy import event

    checkouts = [0]
    event.listen(store.engine.pool, "checkout", lambda *a: checkouts.__setitem__(0, checkouts[0] + 1))
    store.ingest("a", "chat", "m-1", {})
    with store.transactions.pinned():
        start = store.runs.start("a", "A")
        with store.transactions.pinned():  # nested: the same connection
            step = store.runs.finish_and_claim("a", "A", start.generation, [e.id for e in start.events])
    assert step.finished and step.released
    assert checkouts[0] == 2  # the ingest's, then the pinned block's


def test_a_pinned_block_holds_no_connection_while_the_agent_works(store: Store) -> None:
    store.ingest("a", "chat", "m-1", {})
    with store.transactions.pinned():
        start = store.runs.start("a", "A")
        assert store.engine.pool.checkedout() == 1
        with store.transactions.unpinned():  # the agent's run: seconds of waiting
            assert store.engine.pool.checkedout() == 0
            assert store.renew("a", "A", start.generation)  # a heartbeat checks one out and back
            assert store.engine.pool.checkedout() == 0
        assert store.engine.pool.checkedout() == 1  # pinned again for the finish
        assert store.runs.finish_and_claim("a", "A", start.generation, [e.id for e in start.events]).finished
    assert store.engine.pool.checkedout() == 0


def test_finish_and_claim_hands_back_the_next_batch_with_a_fresh_lease(store: Store) -> None:
    fill(store, "a", "m-1")
    start = store.runs.start("a", "A", now=T)
    gen, batch = start.generation, start.events
    fill(store, "a", "m-2", now=T + 100)
    step = store.runs.finish_and_claim("a", "A", gen, [e.id for e in batch], now=T + 100)
    assert step.finished and not step.released
    assert [(e.source_id, e.claim_gen) for e in step.events] == [("m-2", gen)]
    assert store.acquire("a", "B", now=T + 100 + TTL) is None  # extended from T + 100


def test_finish_and_claim_logs_each_run_it_finishes(store: Store) -> None:
    """The run log (the checker's proof that runs never overlapped) gets one row per
    committed finish, whether the lease is then extended, released, or the run failed."""
    fill(store, "a", "m-1")
    start = store.runs.start("a", "A", now=T)
    fill(store, "a", "m-2", now=T + 5)
    first = store.runs.finish_and_claim("a", "A", start.generation, [e.id for e in start.events], now=T + 10)
    second = store.runs.finish_and_claim("a", "A", start.generation, [e.id for e in first.events],
                                         error="boom", now=T + 20)
    assert not first.released and second.released
    log = sorted(store.operator.run_log("a"), key=lambda r: r.id)
    ids = [e.id for e in start.events], [e.id for e in first.events]
    assert [(r.generation, r.holder, r.started, r.finished, r.outcome, list(r.event_ids), r.error)
            for r in log] == [(start.generation, "A", T, T + 10, "done", ids[0], None),
                              (start.generation, "A", T + 10, T + 20, "error", ids[1], "boom")]


def test_start_run_refuses_while_another_holds_the_lease(store: Store) -> None:
    fill(store, "a", "m-1")
    store.acquire("a", "A", now=T)
    assert store.runs.start("a", "B", now=T + 1) == RunStart(None, [], {})
    assert statuses(store, "a") == {"m-1": ("pending", 0)}


def test_finish_and_claim_is_fenced(store: Store) -> None:
    fill(store, "a", "m-1")
    start = store.runs.start("a", "A", now=T)
    gen, batch = start.generation, start.events
    store.runs.start("a", "B", now=T + TTL + 1)
    step = store.runs.finish_and_claim("a", "A", gen, [e.id for e in batch], Outcome(messages=["late"]), now=T + TTL + 2)
    assert (step.finished, step.events, step.released) == (False, [], False)
    assert store.outbox("a") == []
    assert store.acquire("a", "A", now=T + TTL + 3) is None  # B still holds it


def test_a_forced_release_hands_a_busy_inbox_back(store: Store) -> None:
    fill(store, "a", "m-1")
    gen = store.acquire("a", "A", now=T)
    assert store.release("a", "A", gen, now=T) is False
    assert store.release("a", "B", gen, now=T, force=True) is False  # still fenced
    assert store.release("a", "A", gen, now=T, force=True) is True
    assert store.acquire("a", "B", now=T) == gen + 1


def test_renew_many_extends_the_live_leases_it_names_in_one_statement(store: Store) -> None:
    gens = {name: store.acquire(name, "A", now=T) for name in ("a", "b", "c")}
    assert store.acquire("c", "B", now=T + TTL + 1) == gens["c"] + 1  # c was taken over
    renewed = store.runs.renew_many([("a", "A", gens["a"]), ("b", "A", gens["b"] + 5), ("c", "A", gens["c"])],
                                    now=T + 10)
    assert renewed == {("a", "A", gens["a"])}  # b: not that generation; c: not that holder
    assert store.acquire("a", "B", now=T + 10 + TTL) is None  # a full lease from the renewal
    assert store.acquire("a", "B", now=T + 10 + TTL + 1) == gens["a"] + 1
    assert store.runs.renew_many([("a", "A", gens["a"])], now=T + 10 + TTL + 2) == set()  # lost
    assert store.runs.renew_many([]) == set()
