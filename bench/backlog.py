"""Backlogs the doorbells do not describe: a flushed broker, and one hot inbox.

``backlog_*``: the same backlog of one event in each of N inboxes (100,000 in the full run),
drained by the same worker twice: once with every doorbell intact (one message per inbox, as
ingest rang them), once after the broker lost them all, when the first sweep tick rings at
most 1,000 inboxes (as the sweep does, with ``drain``) and those run tasks take the rest
straight from the database (store/backlog.py). ``backlog_ratio`` = rate without doorbells /
rate with them.

``hot_*``: 10,000 events in one inbox against 10,000 over 1,000 inboxes (10 each), same
worker, every doorbell rung; ``hot_inbox_ratio`` = hot rate / spread rate. While the hot
inbox drains, 100 other inboxes get one event each: their time from ingest to done (p50, p99,
on the database's whole-second clock) says whether they waited behind it.
"""

from __future__ import annotations

import itertools
import time

import psycopg

from store import Store
from tasks.celeryconfig import RUNS_QUEUE

from bench import env
from bench.context import Context
from bench.latency import percentile

SWEEP_RINGS = 1000  # what one sweep tick rings (tasks/sweep.py)
_serial = itertools.count()


def _store_backlog(store: Store, items: list[tuple[str, str, str, dict]]) -> None:
    for start in range(0, len(items), 1000):
        store.intake.ingest_many(items[start:start + 1000])


def _wait_done(db: str, timeout: float = 1800) -> float:
    """Seconds until no event is pending or running."""
    start = time.perf_counter()
    with psycopg.connect(env.pg_conninfo(db), autocommit=True) as conn:
        while conn.execute("SELECT EXISTS (SELECT 1 FROM events WHERE status IN ('pending', 'running'))").fetchone()[0]:
            if time.perf_counter() - start > timeout:
                raise TimeoutError(f"backlog not drained after {timeout:.0f}s")
            time.sleep(0.02)
    return time.perf_counter() - start


def _drain(ctx: Context, store: Store, items: list, ring_inboxes: list[str], drain: bool = False) -> float:
    """Events per second: ``items`` stored, ``ring_inboxes`` rung while the worker does not
    consume, then the worker drains everything."""
    from tasks.doorbell import ring

    app, w = ctx.wakeful_app, ctx.wakeful_worker
    app.control.cancel_consumer(RUNS_QUEUE, destination=[w.nodename], reply=True, timeout=5)
    _store_backlog(store, items)
    env.sql(ctx.main_db, "ANALYZE events")
    for inbox in ring_inboxes:
        if drain:  # as the sweep rings: expiring (so never coalesced), and draining
            ring(inbox, expires=30.0, drain=True)
        else:
            ring(inbox)
    start = time.perf_counter()
    app.control.add_consumer(RUNS_QUEUE, destination=[w.nodename], reply=True, timeout=5)
    seconds = (time.perf_counter() - start) + _wait_done(ctx.main_db)
    return len(items) / seconds


def run(ctx: Context) -> None:
    store = Store.connect(env.sqlalchemy_url(ctx.main_db), pool_size=1)
    n = ctx.sizes.backlog_inboxes
    for rep in range(ctx.sizes.backlog_reps):
        tag = next(_serial)
        items = [(f"b{tag}-{i}", "backlog", "m", {"n": i}) for i in range(n)]
        rung = _drain(ctx, store, items, [inbox for inbox, *_ in items])
        ctx.results.add("backlog_with_doorbells_per_s", rung)
        tag = next(_serial)
        items = [(f"b{tag}-{i}", "backlog", "m", {"n": i}) for i in range(n)]
        flushed = _drain(ctx, store, items, [inbox for inbox, *_ in items[:SWEEP_RINGS]], drain=True)
        ctx.results.add("backlog_without_doorbells_per_s", flushed)
        ctx.progress(f"backlog {rep + 1}/{ctx.sizes.backlog_reps}: {n:,} inboxes, {rung:,.0f} events/s with every "
                     f"doorbell, {flushed:,.0f} after a flush (one sweep tick of {SWEEP_RINGS})")
        env.sql(ctx.main_db, "VACUUM ANALYZE events, inboxes, runs")
    for rep in range(ctx.sizes.reps):
        _hot(ctx, store, rep)
    store.dispose()


def _hot(ctx: Context, store: Store, rep: int) -> None:
    from tasks.doorbell import ring

    events = ctx.sizes.hot_events
    tag = next(_serial)
    spread = [(f"s{tag}-{i % 1000}", "hot", f"m-{i}", {"n": i}) for i in range(events)]
    spread_rate = _drain(ctx, store, spread, sorted({inbox for inbox, *_ in spread}))
    tag = next(_serial)
    hot = [(f"hot{tag}", "hot", f"m-{i}", {"n": i}) for i in range(events)]
    others = [(f"o{tag}-{i}", "hot", "m", {"n": i}) for i in range(100)]
    app, w = ctx.wakeful_app, ctx.wakeful_worker
    app.control.cancel_consumer(RUNS_QUEUE, destination=[w.nodename], reply=True, timeout=5)
    _store_backlog(store, hot)
    ring(f"hot{tag}")
    start = time.perf_counter()
    app.control.add_consumer(RUNS_QUEUE, destination=[w.nodename], reply=True, timeout=5)
    for inbox, source, source_id, payload in others:  # arriving while the hot inbox drains
        store.ingest(inbox, source, source_id, payload)
        ring(inbox)
        time.sleep(0.005)
    seconds = (time.perf_counter() - start) + _wait_done(ctx.main_db)
    hot_rate = (events + len(others)) / seconds
    waits = [float(r[0]) for r in env.sql(ctx.main_db, "SELECT finished - created FROM events "
                                                      "WHERE inbox LIKE %s", (f"o{tag}-%",))]
    ctx.results.add("hot_spread_per_s", spread_rate)
    ctx.results.add("hot_inbox_per_s", hot_rate)
    ctx.results.add("hot_others_done_p50_s", percentile(waits, 50))
    ctx.results.add("hot_others_done_p99_s", percentile(waits, 99))
    ctx.progress(f"hot inbox {rep + 1}/{ctx.sizes.reps}: {events:,} events in one inbox {hot_rate:,.0f}/s, "
                 f"over 1,000 inboxes {spread_rate:,.0f}/s; 100 others done in p50 {percentile(waits, 50):.0f} s, "
                 f"p99 {percentile(waits, 99):.0f} s")
    env.sql(ctx.main_db, "VACUUM ANALYZE events, inboxes, runs")
