"""``ingest_many_per_s`` against ``pgbench_insert_tps``: rows stored per second straight into
the store by the same number of clients (the workers' concurrency), wakeful's batched
``store.intake.ingest_many`` against pgbench running the store's own single-row
``INSERT ... ON CONFLICT DO NOTHING RETURNING id`` (and, for reference, the same statement
inserting a whole batch)."""

from __future__ import annotations

import multiprocessing
import re
import subprocess
import time

from bench import env
from bench.context import Context

CLIENTS = env.CONCURRENCY
NOW_SQL = "floor(extract(epoch FROM clock_timestamp()))::bigint"

SINGLE = f"""\\set k random(1, 2000000000)
INSERT INTO events (inbox, source, source_id, payload, created)
VALUES ('bench-' || (:k % 1000), 'pgbench', :client_id || '-' || :k, '{{}}'::jsonb, {NOW_SQL})
ON CONFLICT (inbox, source, source_id) DO NOTHING RETURNING id;
"""

BATCH = f"""\\set k random(1, 2000000000)
INSERT INTO events (inbox, source, source_id, payload, created)
SELECT 'bench-' || (g % 1000), 'pgbench-batch', :client_id || '-' || :k || '-' || g, '{{}}'::jsonb, {NOW_SQL}
FROM generate_series(1, {{batch}}) AS g
ON CONFLICT (inbox, source, source_id) DO NOTHING RETURNING id;
"""


def _client(url: str, client: int, rep: int, batch: int, start_at: float, seconds: float, out) -> None:
    from store import Store

    store = Store.connect(url, pool_size=1)
    store.intake.ingest_many([(f"warm-{client}", "bench", f"warm-{rep}-{client}", {})])
    while time.time() < start_at:
        time.sleep(0.001)
    began = time.perf_counter()
    rows = 0
    n = 0
    while time.perf_counter() - began < seconds:
        items = [(f"bench-{(n + i) % 1000}", "many", f"{rep}-{client}-{n + i}", {"n": n + i})
                 for i in range(batch)]
        stored = store.intake.ingest_many(items)
        rows += sum(stored)
        n += batch
    out.put((rows, time.perf_counter() - began))
    store.dispose()


def ingest_many_rate(ctx: Context, rep: int) -> float:
    mp = multiprocessing.get_context("fork")
    out = mp.Queue()
    start_at = time.time() + 0.5
    procs = [mp.Process(target=_client, args=(env.sqlalchemy_url(ctx.main_db), c, rep, ctx.sizes.batch,
                                              start_at, ctx.sizes.insert_seconds, out))
             for c in range(CLIENTS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    return sum(r for r, _ in results) / max(t for _, t in results)


def pgbench_tps(ctx: Context, script: str) -> float:
    path = ctx.home / f"pgbench-{abs(hash(script))}.sql"
    path.write_text(script)
    seconds = max(1, round(ctx.sizes.insert_seconds))
    done = subprocess.run(
        ["pgbench", "-n", "-c", str(CLIENTS), "-j", str(CLIENTS), "-T", str(seconds), "-f", str(path),
         "-h", env.PG_HOST, "-p", str(env.PG_PORT), "-U", env.PG_USER, ctx.main_db],
        capture_output=True, text=True, check=True)
    match = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", done.stdout)
    if not match:
        raise RuntimeError(f"pgbench said: {done.stdout}\n{done.stderr}")
    return float(match.group(1))


def run(ctx: Context) -> None:
    batch = BATCH.replace("{batch}", str(ctx.sizes.batch))
    for rep in range(ctx.sizes.reps):
        many = ingest_many_rate(ctx, rep)
        ctx.results.add("ingest_many_per_s", many)
        single = pgbench_tps(ctx, SINGLE)
        ctx.results.add("pgbench_insert_tps", single)
        rows = pgbench_tps(ctx, batch) * ctx.sizes.batch
        ctx.results.add("pgbench_insert_batch_rows_per_s", rows)
        ctx.progress(f"inserts {rep + 1}/{ctx.sizes.reps}: ingest_many {many:,.0f} rows/s, "
                     f"pgbench {single:,.0f} tps (1 row), {rows:,.0f} rows/s ({ctx.sizes.batch}-row statement)")
    env.sql(ctx.main_db, "TRUNCATE events, inboxes, runs")
    env.sql(ctx.main_db, "VACUUM ANALYZE events")
