"""``pgbouncer_drain_ratio``: the 1-event-per-wake drain through PgBouncer 1.18 in transaction
pooling mode (``WAKEFUL_DATABASE_POOLER=transaction``) against the same drain direct, same
worker shape, same run; and 64 worker processes draining through PgBouncer, with the most
server connections PgBouncer held for them meanwhile (its pool is 10)."""

from __future__ import annotations

import sys
import threading
import time

import psycopg

from store import Store
from tasks.celeryconfig import DEFAULT_QUEUE, RUNS_QUEUE

from bench import env
from bench.context import Context
from bench.drain import wakeful_rate

sys.path.insert(0, str(env.ROOT / "tests"))
from pgbouncer import pgbouncer_binary, running_pgbouncer, server_connections, through  # noqa: E402  (tests/pgbouncer.py)

MANY = 64


def run(ctx: Context) -> None:
    if pgbouncer_binary() is None:
        raise env.PeerMissing("no pgbouncer binary (apt-get install pgbouncer)")
    app, main = ctx.wakeful_app, ctx.wakeful_worker
    store = Store.connect(env.sqlalchemy_url(ctx.main_db), pool_size=1)
    with running_pgbouncer() as port, psycopg.connect(env.pg_conninfo(ctx.main_db), autocommit=True) as conn:
        def live() -> int:
            return conn.execute("SELECT count(*) FROM events WHERE status IN ('pending', 'running')").fetchone()[0]

        worker_env = dict(main.env, WAKEFUL_DATABASE_URL=through(env.sqlalchemy_url(ctx.main_db), port),
                          WAKEFUL_DATABASE_POOLER="transaction")
        bounced = env.Worker("wakeful-pgbouncer", "tasks", (RUNS_QUEUE,), worker_env, ctx.home).start()
        app.control.cancel_consumer(DEFAULT_QUEUE, destination=[main.nodename], reply=True, timeout=5)
        try:
            bounced.wait_ready(app.control)
            inboxes = ctx.sizes.drain_inboxes_1
            for rep in range(ctx.sizes.reps):
                rates = {}
                for name, worker, idle in (("direct", main, bounced), ("pgbouncer", bounced, main)):
                    app.control.cancel_consumer(RUNS_QUEUE, destination=[idle.nodename], reply=True, timeout=5)
                    ctx.wakeful_worker = worker
                    try:
                        rates[name] = wakeful_rate(ctx, store, 1, ctx.sizes.drain_rounds, live, inboxes)
                    finally:
                        ctx.wakeful_worker = main
                        app.control.add_consumer(RUNS_QUEUE, destination=[idle.nodename], reply=True, timeout=5)
                ctx.results.add("drain_direct_per_s", rates["direct"])
                ctx.results.add("drain_pgbouncer_per_s", rates["pgbouncer"])
                ctx.progress(f"pgbouncer {rep + 1}/{ctx.sizes.reps}: 1 event per wake {rates['pgbouncer']:,.0f}/s "
                             f"through PgBouncer, {rates['direct']:,.0f}/s direct")
            bounced.stop()
            _many(ctx, store, worker_env, port, live)
        finally:
            bounced.stop()
            app.control.add_consumer(DEFAULT_QUEUE, destination=[main.nodename], reply=True, timeout=5)
    store.dispose()


def _many(ctx: Context, store: Store, worker_env: dict[str, str], port: int, live) -> None:  # type: ignore[no-untyped-def]
    app, main = ctx.wakeful_app, ctx.wakeful_worker
    many = env.Worker("wakeful-64", "tasks", (RUNS_QUEUE,), worker_env, ctx.home, concurrency=MANY).start()
    app.control.cancel_consumer(RUNS_QUEUE, destination=[main.nodename], reply=True, timeout=5)
    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], server_connections(port, ctx.main_db))
            time.sleep(0.05)

    try:
        many.wait_ready(app.control, timeout=180)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        ctx.wakeful_worker = many
        rate = wakeful_rate(ctx, store, 1, 1, live, ctx.sizes.drain_inboxes_1)
        stop.set()
        watcher.join()
        ctx.results.add("pgbouncer_64_workers_per_s", rate)
        ctx.results.add("pgbouncer_64_workers_server_connections", peak[0])
        ctx.progress(f"pgbouncer: {MANY} worker processes drained {rate:,.0f} events/s on at most "
                     f"{peak[0]} server connections")
    finally:
        stop.set()
        ctx.wakeful_worker = main
        many.stop()
        app.control.add_consumer(RUNS_QUEUE, destination=[main.nodename], reply=True, timeout=5)
