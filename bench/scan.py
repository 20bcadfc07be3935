"""``scan_ms_due10k_of_10k`` and ``scan_ms_due10k_of_1m``: ``Store.run_scheduler`` firing
10,000 due one-off timers when they are all the timers there are, and when 990,000 timers
that are not due sit beside them (bulk-inserted with ``generate_series``, then ANALYZE).
Between runs the fired timers are made due again and their events deleted (untimed)."""

from __future__ import annotations

import time

from store import Store

from bench import env
from bench.context import Context

DB = "wakeful_bench_scan"
NOW = 2_000_000_000


def _add(db: str, prefix: str, n: int, due: str) -> None:
    env.sql(db, f"""
        INSERT INTO timers (inbox, timer_id, due, payload, misfire, done)
        SELECT 'inbox-' || (g % 1000), '{prefix}-' || g, {due}, '{{"n": 1}}'::jsonb, 'coalesce', false
        FROM generate_series(1, {int(n)}) AS g""")


def _reset(db: str) -> None:
    env.sql(db, f"UPDATE timers SET done = false, due = {NOW - 60} WHERE timer_id LIKE 'due-%'")
    env.sql(db, "TRUNCATE events, inboxes")
    env.sql(db, "VACUUM ANALYZE timers")


def _scan(ctx: Context, store: Store, key: str, due: int) -> None:
    for rep in range(ctx.sizes.reps):
        _reset(DB)
        start = time.perf_counter()
        fired = store.run_scheduler(now=NOW)
        ms = (time.perf_counter() - start) * 1000
        if len(fired) != due:
            raise RuntimeError(f"the scan fired {len(fired)} timers, expected {due}")
        ctx.results.add(key, ms)
        ctx.progress(f"scan {rep + 1}/{ctx.sizes.reps} {key}: {ms:,.0f} ms")


def run(ctx: Context) -> None:
    s = ctx.sizes
    env.create_database(DB)
    store = Store.connect(env.sqlalchemy_url(DB), pool_size=1)
    store.migrate()
    try:
        _add(DB, "due", s.scan_due, str(NOW - 60))
        _add(DB, "idle", s.scan_small - s.scan_due, f"{NOW + 86400} + g % 86400")
        store.run_scheduler(now=NOW)  # warm-up (connection, statement caches)
        _scan(ctx, store, "scan_ms_due10k_of_10k", s.scan_due)
        ctx.progress(f"scan: adding {s.scan_large - s.scan_small:,} timers that are not due")
        _add(DB, "idle-large", s.scan_large - s.scan_small, f"{NOW + 86400} + g % 86400")
        _scan(ctx, store, "scan_ms_due10k_of_1m", s.scan_due)
        plan = env.sql(DB, f"EXPLAIN SELECT * FROM timers WHERE NOT done AND due <= {NOW} ORDER BY due LIMIT 500 FOR UPDATE SKIP LOCKED")
        ctx.results.notes["scan_plan_1m"] = [row[0] for row in plan]
    finally:
        store.dispose()
        env.drop_database(DB)
