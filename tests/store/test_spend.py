"""Budgets in the store (store/spend.py), on both engines, time passed as ``now``: each call
counted for the inbox and the agent, unfenced; a ceiling refuses once reached, the refusal
recorded and the user told once a day, fenced by the lease; the next UTC day starts again."""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy import event

from store import Store
from store.spend import DAY, Budget, Price, Usage, shard_of

DAY0 = 20_000 * DAY  # a UTC midnight
T = DAY0 + 3600
TTL = 120
PRICED = {"m": Price(input=3.0, output=15.0)}


def _held(store: Store, inbox: str, now: int = T) -> int:
    gen = store.acquire(inbox, "w", now=now)
    assert gen is not None
    return gen


def test_each_call_is_counted_for_the_inbox_and_the_agent_with_its_price(store: Store) -> None:
    budget = Budget(agent="support", inbox_tokens=10_000, prices=PRICED)
    store.spend.count("a", budget, Usage("m", input_tokens=1000, output_tokens=100), now=T)
    store.spend.count("a", budget, Usage("m", input_tokens=200, output_tokens=50, cache_read_tokens=1000), now=T + 5)
    store.spend.count("b", budget, Usage("unpriced", input_tokens=10, output_tokens=1), now=T + 6)
    rows = {(r.scope, r.name): r for r in store.spend.today("a", now=T + 7)}
    assert set(rows) == {("inbox", "a"), ("agent", "support")}  # b's own row is not asked for
    a, agent = rows["inbox", "a"], rows["agent", "support"]
    assert (a.calls, a.input_tokens, a.output_tokens, a.tokens) == (2, 2200, 150, 2350)
    # 1000*3 + 100*15 + 200*3 + 50*15 + 1000*0.3 (a cache read at 0.1x input), per million
    assert abs(a.cost - 6150 / 1e6) < 1e-12
    assert (a.token_ceiling, a.cost_ceiling, a.refused, a.told) == (10_000, None, 0, None)
    assert (agent.calls, agent.tokens) == (3, 2361) and abs(agent.cost - a.cost) < 1e-12  # unpriced: 0
    assert [r.day for r in store.spend.today("a", now=T)] == [DAY0, DAY0]
    assert store.spend.today("a", now=DAY0 + DAY) == []  # a new day: nothing spent yet


def test_usage_is_read_from_the_sdk_reply_or_a_dict() -> None:
    class SdkUsage:
        input_tokens, output_tokens = 12, 3
        cache_creation_input_tokens, cache_read_input_tokens = None, 4

    assert Usage.of("m", SdkUsage()) == Usage("m", 12, 3, 0, 4)
    assert Usage.of("m", {"input_tokens": 5}).tokens == 5


def test_a_budget_without_a_ceiling_is_checked_without_a_transaction(store: Store) -> None:
    """The claude agent checks before every model call; with no ceiling there is nothing to
    read, so no statement goes to the database (it took a transaction per call)."""
    gen = _held(store, "a")
    statements: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    verdict = store.spend.check("a", "w", gen, Budget(agent="support"))
    assert (verdict.allowed, verdict.resumes_at, statements) == (True, None, [])
    limited = store.spend.check("a", "w", gen, Budget(agent="support", inbox_tokens=10), now=T)
    assert limited.allowed and limited.resumes_at == DAY0 + DAY and statements  # a ceiling is read


def test_a_reached_ceiling_refuses_records_and_tells_the_user_once_a_day(store: Store) -> None:
    budget = Budget(agent="support", inbox_tokens=1000, notice="Budget spent for today.")
    gen = _held(store, "a")
    assert store.spend.check("a", "w", gen, budget, now=T).allowed  # nothing spent yet
    store.spend.count("a", budget, Usage("m", input_tokens=900, output_tokens=99), now=T)
    assert store.spend.check("a", "w", gen, budget, now=T + 1).allowed  # 999 < 1000: the call goes
    store.spend.count("a", budget, Usage("m", input_tokens=900, output_tokens=100), now=T + 2)
    first = store.spend.check("a", "w", gen, budget, now=T + 3)
    assert (first.allowed, first.held, first.told, first.resumes_at) == (False, True, True, DAY0 + DAY)
    assert first.reached == "inbox 'a': 1999 tokens of 1000 today"
    again = store.spend.check("a", "w", gen, budget, now=T + 4)
    assert (again.allowed, again.told) == (False, False)
    gen2 = _held(store, "a", now=T + TTL + 10)  # another run, later that day: not told again
    assert not store.spend.check("a", "w", gen2, budget, now=T + TTL + 11).told
    # Not held behind the outbox gap while the person's messages go unanswered (issue 57):
    # at most once a day, so it may go at once.
    assert [(m.body, m.urgent) for m in store.outbox("a")] == [("Budget spent for today.", True)]
    [row] = [r for r in store.spend.today("a", now=T) if r.scope == "inbox"]
    assert (row.refused, row.first_refused, row.told) == (3, T + 3, T + 3)
    assert [r.scope for r in store.spend.incidents(T)] == ["inbox"]
    assert store.spend.incidents(T + 4) == []
    # The next UTC day: the budget is whole again, and a refusal tells the user again.
    tomorrow = DAY0 + DAY + 10
    gen3 = _held(store, "a", now=tomorrow)
    assert store.spend.check("a", "w", gen3, budget, now=tomorrow).allowed
    store.spend.count("a", budget, Usage("m", input_tokens=1000), now=tomorrow)
    assert store.spend.check("a", "w", gen3, budget, now=tomorrow + 1).told
    assert len(store.outbox("a")) == 2


def test_the_agents_ceiling_counts_every_inbox_and_tells_each_user(store: Store) -> None:
    budget = Budget(agent="support", agent_tokens=500)
    store.spend.count("a", budget, Usage("m", input_tokens=300), now=T)
    store.spend.count("b", budget, Usage("m", input_tokens=250), now=T)
    verdict = store.spend.check("c", "w", _held(store, "c"), budget, now=T + 1)  # c spent nothing
    assert (verdict.allowed, verdict.told) == (False, True)
    assert verdict.reached == "agent 'support': 550 tokens of 500 today"
    assert len(store.outbox("c")) == 1 and store.outbox("a") == []
    rows = {(r.scope, r.name): r for r in store.spend.today("c", now=T + 1)}
    assert rows["agent", "support"].refused == 1
    assert (rows["inbox", "c"].refused, rows["inbox", "c"].told, rows["inbox", "c"].calls) == (0, T + 1, 0)
    figures = store.operator.metrics(now=T + 2)["budgets"]
    assert figures["reached_today"] == {"inbox": 0, "agent": 1}
    assert figures["refused_calls"] == {"inbox": 0, "agent": 1}
    assert figures["agents_today"]["support"]["tokens"] == 550


def test_a_money_ceiling(store: Store) -> None:
    budget = Budget(agent="support", inbox_money=0.01, prices=PRICED)
    gen = _held(store, "a")
    store.spend.count("a", budget, Usage("m", input_tokens=1000, output_tokens=400), now=T)  # 0.009
    assert store.spend.check("a", "w", gen, budget, now=T).allowed
    store.spend.count("a", budget, Usage("m", input_tokens=1000), now=T)  # 0.012
    verdict = store.spend.check("a", "w", gen, budget, now=T)
    assert not verdict.allowed and "0.0120 of 0.0100 (money)" in verdict.reached


def test_a_refusal_is_fenced_but_a_count_is_not(store: Store) -> None:
    budget = Budget(agent="support", inbox_tokens=10)
    old = _held(store, "a")
    new = store.acquire("a", "w2", now=T + TTL + 1)  # the first worker stalled; taken over
    assert new is not None and new != old
    store.spend.count("a", budget, Usage("m", input_tokens=50), now=T + TTL + 2)  # the stalled run's call
    lost = store.spend.check("a", "w", old, budget, now=T + TTL + 3)
    assert (lost.allowed, lost.held, lost.told) == (False, False, False)
    assert store.outbox("a") == [] and store.spend.incidents(T) == []  # nothing written
    assert store.spend.today("a", now=T)[-1].tokens == 50  # counted all the same
    assert store.spend.check("a", "w2", new, budget, now=T + TTL + 4).told


def test_the_figures_survive_a_restart_and_retention_drops_old_days(
        make_store: Callable[..., Store], store: Store) -> None:
    budget = Budget(agent="support", inbox_tokens=100)
    store.spend.count("a", budget, Usage("m", input_tokens=120), now=T)
    store.dispose()
    again = make_store()  # a restarted process: its own engine, the same database
    assert not again.spend.check("a", "w", _held(again, "a"), budget, now=T + 1).allowed
    again.spend.count("a", budget, Usage("m", input_tokens=1), now=T + 2 * DAY)
    # The first day ended before the cutoff: both its rows go.
    assert again.purge(older_than=DAY, now=T + 2 * DAY)["spend"] == 2
    assert [r.day for r in again.spend.today("a", now=T + 2 * DAY)] == [DAY0 + 2 * DAY] * 2


def test_no_ceiling_is_no_check(store: Store) -> None:
    budget = Budget(agent="support")
    store.spend.count("a", budget, Usage("m", input_tokens=10**9), now=T)
    assert store.spend.check("a", "nobody", 7, budget, now=T).allowed  # nothing to check: no lock taken


def test_the_agents_ceiling_is_reached_by_the_sum_of_inboxes_on_different_shards(store: Store) -> None:
    budget = Budget(agent="support", agent_tokens=395)
    inboxes = [f"user-{n}" for n in range(40)]
    assert len({shard_of(inbox) for inbox in inboxes}) > 8  # spread: no shard alone reaches the ceiling
    for inbox in inboxes[:39]:
        store.spend.count(inbox, budget, Usage("m", input_tokens=10), now=T)
    assert store.spend.check("user-0", "w", _held(store, "user-0"), budget, now=T + 1).allowed  # 390
    store.spend.count(inboxes[39], budget, Usage("m", input_tokens=10), now=T + 2)  # 400: reached
    first, other = "user-0", next(i for i in inboxes if shard_of(i) != shard_of("user-0"))
    assert store.spend.check(first, "w", _held(store, first), budget, now=T + 3).reached == (
        "agent 'support': 400 tokens of 395 today")
    assert not store.spend.check(other, "w", _held(store, other), budget, now=T + 4).allowed
    # Every reader sees the agent's day as one figure: the two refusals, the first one's time.
    [agent] = [r for r in store.spend.today(now=T + 5) if r.scope == "agent"]
    assert (agent.name, agent.calls, agent.tokens, agent.token_ceiling) == ("support", 40, 400, 395)
    assert (agent.refused, agent.first_refused, agent.told) == (2, T + 3, None)
    assert [(r.scope, r.name, r.refused) for r in store.spend.incidents(T)] == [("agent", "support", 2)]
    assert store.spend.incidents(T + 4) == []  # the agent's first refusal was before
    figures = store.operator.metrics(now=T + 5)["budgets"]
    assert figures["agents_today"]["support"] == {"tokens": 400, "cost": 0.0, "calls": 40}
    assert figures["reached_today"] == {"inbox": 0, "agent": 1}
    assert figures["refused_calls"] == {"inbox": 0, "agent": 2}


def test_many_counts_at_once_all_land_and_the_agents_sum_is_exact(pg_url: str) -> None:
    """200 model calls answering at once, each counted from its own thread through a small
    pool: no count fails (none waits long on a lock: the inboxes add to different shards)."""
    store = Store.connect(pg_url, pool_size=2, max_overflow=2)
    budget = Budget(agent="support", agent_tokens=10**9)
    threads_n = 200
    start = threading.Barrier(threads_n)
    failed: list[BaseException] = []

    def count(n: int) -> None:
        start.wait()
        try:
            store.spend.count(f"user-{n % 50}", budget, Usage("m", input_tokens=n + 1, output_tokens=1), now=T)
        except BaseException as exc:  # noqa: BLE001 - counted below
            failed.append(exc)

    threads = [threading.Thread(target=count, args=(n,)) for n in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert failed == []
        [agent] = [r for r in store.spend.today(now=T) if r.scope == "agent"]
        assert (agent.calls, agent.input_tokens, agent.output_tokens) == (
            threads_n, sum(range(1, threads_n + 1)), threads_n)
        [user] = [r for r in store.spend.today("user-7", now=T) if r.scope == "inbox"]
        assert (user.calls, user.input_tokens) == (4, 8 + 58 + 108 + 158)
    finally:
        store.dispose()
