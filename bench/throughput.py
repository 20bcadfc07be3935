"""``ingest_per_s`` against ``celery_noop_per_s``: task messages drained per second by the
same worker shape, wakeful's ``wakeful.ingest`` (store the event, ring its inbox) against a
Celery task that does nothing."""

from __future__ import annotations

import itertools

from tasks.celeryconfig import DEFAULT_QUEUE, RUNS_QUEUE

from bench import env, peer
from bench.context import Context
from bench.queues import drain_rate, wait_drained

INBOXES = 1000
_serial = itertools.count()


def run(ctx: Context) -> None:
    app, papp, w, p = ctx.wakeful_app, ctx.peer_app, ctx.wakeful_worker, ctx.peer_worker
    r = env.redis_client()
    n = ctx.sizes.ingest_n
    # The doorbells ingest rings are left queued (not run) so only ingest is measured.
    app.control.cancel_consumer(RUNS_QUEUE, destination=[w.nodename], reply=True, timeout=5)
    stored_before = _stored(ctx)

    def fill_ingest() -> None:
        tag = next(_serial)
        for i in range(n):
            app.send_task("wakeful.ingest", kwargs={
                "inbox": f"bench-{i % INBOXES}", "source": "bench", "source_id": f"t{tag}-{i}",
                "payload": {"n": i}})

    def fill_noop() -> None:
        for _ in range(n):
            papp.send_task("bench.noop", queue=peer.QUEUE)

    # Warm-up: both workers' children have run tasks and opened their connections.
    drain_rate(app, w, DEFAULT_QUEUE, n // 5, _fill(app, n // 5), r)
    drain_rate(papp, p, peer.QUEUE, n // 5, lambda: [papp.send_task("bench.noop", queue=peer.QUEUE) for _ in range(n // 5)], r)
    cpu_ingest: dict[str, float] = {}
    cpu_noop: dict[str, float] = {}
    ctx.results.notes.update(cpu_ms_per_ingest=cpu_ingest, cpu_ms_per_noop=cpu_noop)  # the last run's
    for rep in range(ctx.sizes.reps):
        rate = drain_rate(app, w, DEFAULT_QUEUE, n, fill_ingest, r, cpu=cpu_ingest)
        ctx.results.add("ingest_per_s", rate)
        noop = drain_rate(papp, p, peer.QUEUE, n, fill_noop, r, cpu=cpu_noop)
        ctx.results.add("celery_noop_per_s", noop)
        ctx.progress(f"ingest {rep + 1}/{ctx.sizes.reps}: wakeful.ingest {rate:,.0f}/s, "
                     f"celery no-op {noop:,.0f}/s")
    stored = _stored(ctx) - stored_before
    expected = n * ctx.sizes.reps + n // 5
    if stored != expected:
        raise RuntimeError(f"ingest stored {stored} events, expected {expected}")
    # Drop the doorbells and the events: the next figures start from an empty store.
    r.delete(RUNS_QUEUE)
    env.sql(ctx.main_db, "TRUNCATE events, inboxes, runs")
    app.control.add_consumer(RUNS_QUEUE, destination=[w.nodename], reply=True, timeout=5)
    wait_drained(r, RUNS_QUEUE, 30)


def _fill(app, n: int):
    def fill() -> None:
        tag = next(_serial)
        for i in range(n):
            app.send_task("wakeful.ingest", kwargs={
                "inbox": f"warm-{i % INBOXES}", "source": "bench", "source_id": f"w{tag}-{i}",
                "payload": {}})
    return fill


def _stored(ctx: Context) -> int:
    return env.sql(ctx.main_db, "SELECT count(*) FROM events")[0][0]
