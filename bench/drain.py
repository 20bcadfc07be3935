"""``events_per_s_1``/``events_per_s_10`` against ``procrastinate_per_s``: a pre-loaded
backlog over 1,000 inboxes drained by the same worker (no-op agent), one doorbell per inbox,
at 1 and at 10 events per wake; procrastinate drains the same number of jobs with a per-key
``lock`` over the same 1,000 keys, with as many worker processes."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time

import psycopg

from store import Store
from tasks.celeryconfig import DEFAULT_QUEUE, RUNS_QUEUE

from bench import env
from bench.context import Context
from bench.cpu import CpuMeter
from bench.queues import drain_rate

INBOXES = 1000
_serial = itertools.count()


def wakeful_rate(ctx: Context, store: Store, per_wake: int, rounds: int, live, inboxes: int = INBOXES,
                 profile: str = "") -> float:
    app, w = ctx.wakeful_app, ctx.wakeful_worker
    r = env.redis_client()
    from tasks.doorbell import ring

    seconds = 0.0
    events = 0
    for _ in range(rounds):
        tag = next(_serial)
        items = [(f"inbox-{i % inboxes}", "drain", f"{tag}-{i}", {"n": i}) for i in range(inboxes * per_wake)]
        for start in range(0, len(items), 1000):
            store.intake.ingest_many(items[start:start + 1000])
        # The tables as autovacuum would keep them on a long-lived installation, as
        # procrastinate's table starts each run empty below. Without statistics a worker's
        # connections keep the generic plan PostgreSQL made for the claim while the table
        # looked tiny (a hash join over a scan of every event), and each round drained
        # slower: 469 -> 426 -> 310 wakes/s. Without the VACUUM (autovacuum is off on the
        # bench machine) each round's dead row versions stay in the pending-events index
        # that every claim and take walks: 1.05 -> 0.76 -> 0.68x procrastinate over three runs.
        env.sql(ctx.main_db, "VACUUM ANALYZE events, inboxes, runs")

        def fill() -> None:
            for i in range(inboxes):
                ring(f"inbox-{i}")

        profiler = None
        if profile:
            from bench.profile import Profiler

            profiler = Profiler(ctx.home)
            expected = len(items) / max(ctx.results.median(profile) or 50, 1)
            fill_then_profile = fill

            def fill() -> None:
                fill_then_profile()
                for pid in w.children():
                    profiler.start("pool process", pid, expected * 0.8)
                profiler.start("main process", w.popen.pid, expected * 0.8)

        try:
            cpu: dict[str, float] = {}
            rate = drain_rate(app, w, RUNS_QUEUE, len(items), fill, r, extra=lambda: live() == 0, cpu=cpu)
            ctx.results.notes[f"cpu_ms_per_event_{per_wake}"] = cpu
        except TimeoutError as exc:
            left = env.sql(ctx.main_db, "SELECT status, attempts, not_before > 0, left(error, 200), count(*)"
                           " FROM events WHERE status IN ('pending', 'running') GROUP BY 1, 2, 3, 4")
            raise TimeoutError(f"{exc}; events left (status, attempts, in backoff, error, n): {left}; "
                               f"see {w.log}") from None
        if profiler is not None:
            ctx.results.notes[f"profile_{profile}"] = profiler.finish()
            ctx.progress(f"profile of the worker during {profile}: {ctx.results.notes[f'profile_{profile}']}")
        seconds += len(items) / rate
        events += len(items)
    return events / seconds


def procrastinate_rate(ctx: Context, db: str, jobs: int, keys: int = INBOXES) -> tuple[float, float]:
    """(jobs per second from the first job's start to the last one's success, peak RSS MB)."""
    from bench import procrastinate_peer as peer

    env.sql(db, "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_workers RESTART IDENTITY CASCADE")
    for i in range(jobs):
        peer.noop.configure(lock=f"key-{i % keys}").defer(n=i)
    # Statistics for the fetch query, as autovacuum would have them on a long-lived queue
    # (without them its per-lock NOT EXISTS check degrades to ~30 jobs/s here).
    env.sql(db, "ANALYZE procrastinate_jobs")
    procs = [_start_procrastinate(ctx, db, n) for n in range(env.CONCURRENCY)]
    peak: dict[int, int] = {}
    meter = CpuMeter({p.pid: "pool" for p in procs})
    metered = 0  # jobs left when the first one started: the CPU meter runs from there, like the rate
    try:
        deadline = time.monotonic() + 600
        with psycopg.connect(env.pg_conninfo(db), autocommit=True) as conn:
            while True:
                left, started = conn.execute(
                    "SELECT count(*) FILTER (WHERE status IN ('todo', 'doing')),"
                    " count(*) FILTER (WHERE status <> 'todo') FROM procrastinate_jobs").fetchone()
                if not left:
                    break
                if started and not metered:  # the workers are up: leave their start-up out
                    meter.start()
                    metered = left
                for p in procs:
                    _sample(p.pid, peak)
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError(f"procrastinate did not drain: see {ctx.home}/procrastinate-*.log")
                time.sleep(0.01)
            meter.stop()
            window, failed = conn.execute(
                "SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded') - min(at) FILTER (WHERE type = 'started')),"
                " count(*) FILTER (WHERE type = 'failed') FROM procrastinate_events").fetchone()
        if failed:
            raise RuntimeError(f"{failed} procrastinate jobs failed")
        if metered:
            ctx.results.notes["cpu_ms_per_procrastinate_job"] = meter.per_item(metered)
    finally:
        for p in procs:
            _sample(p.pid, peak)
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
    return jobs / float(window), max(peak.values(), default=0) / 1024


def _start_procrastinate(ctx: Context, db: str, n: int) -> subprocess.Popen:
    log = open(ctx.home / f"procrastinate-{n}.log", "ab")
    e = dict(os.environ, BENCH_PROCRASTINATE_DSN=env.pg_conninfo(db))
    return subprocess.Popen([sys.executable, "-m", "bench.procrastinate_peer"], env=e, cwd=env.ROOT,
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _sample(pid: int, peak: dict[int, int]) -> None:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                peak[pid] = max(peak.get(pid, 0), int(line.split()[1]))
    except OSError:
        pass


def setup_procrastinate(ctx: Context) -> str:
    db = env.create_database("wakeful_bench_procrastinate")
    os.environ["BENCH_PROCRASTINATE_DSN"] = env.pg_conninfo(db)
    import importlib

    from bench import procrastinate_peer as peer

    # Its app reads BENCH_PROCRASTINATE_DSN when the module is imported, and the agents section
    # imports it before this database exists: imported again, on this one.
    importlib.reload(peer)
    peer.app.open()
    peer.app.schema_manager.apply_schema()
    return db


def run(ctx: Context) -> None:
    alone_on_runs(ctx, lambda: _run(ctx))


def alone_on_runs(ctx: Context, drain) -> None:  # type: ignore[no-untyped-def]
    # The worker drains wakeful.runs alone, as the Procfile's ``worker`` process does (ingest
    # and control run on ``control``). Consuming a second, idle queue as well costs this
    # figure twice: kombu's Redis transport then BRPOPs both lists on every fetch (~30 %
    # fewer wakes/s, measured), and after add_consumer the new queue is only polled when
    # the BRPOP already waiting on the idle one times out (up to 1 s per drain).
    app, w = ctx.wakeful_app, ctx.wakeful_worker
    app.control.cancel_consumer(DEFAULT_QUEUE, destination=[w.nodename], reply=True, timeout=5)
    try:
        drain()
    finally:
        app.control.add_consumer(DEFAULT_QUEUE, destination=[w.nodename], reply=True, timeout=5)


def _run(ctx: Context) -> None:
    store = Store.connect(env.sqlalchemy_url(ctx.main_db), pool_size=1)
    pdb = setup_procrastinate(ctx)
    jobs = ctx.sizes.procrastinate_jobs
    with psycopg.connect(env.pg_conninfo(ctx.main_db), autocommit=True) as conn:
        def live() -> int:
            return conn.execute("SELECT count(*) FROM events WHERE status IN ('pending', 'running')").fetchone()[0]

        wakeful_rate(ctx, store, 1, 1, live, min(200, ctx.sizes.drain_inboxes_1))  # warm-up
        for rep in range(ctx.sizes.reps):
            one = wakeful_rate(ctx, store, 1, ctx.sizes.drain_rounds, live, ctx.sizes.drain_inboxes_1)
            ctx.results.add("events_per_s_1", one)
            ten = wakeful_rate(ctx, store, 10, 1, live, ctx.sizes.drain_inboxes_10)
            ctx.results.add("events_per_s_10", ten)
            rate, rss = procrastinate_rate(ctx, pdb, jobs, ctx.sizes.drain_inboxes_1)
            if rep == ctx.sizes.reps - 1 and ctx.profile:
                wakeful_rate(ctx, store, 1, 1, live, ctx.sizes.drain_inboxes_1, profile="events_per_s_1")
            ctx.results.add("procrastinate_per_s", rate)
            ctx.results.add("procrastinate_worker_rss_mb", rss)
            ctx.progress(f"drain {rep + 1}/{ctx.sizes.reps}: wakeful {one:,.0f} events/s at 1/wake, "
                         f"{ten:,.0f} at 10/wake; procrastinate {rate:,.0f} jobs/s ({jobs} jobs)")
    store.dispose()
    # The drains leave ~10^5 dead row versions; let the next figures start from the steady
    # state autovacuum would reach (untimed).
    env.sql(ctx.main_db, "VACUUM ANALYZE events, inboxes, runs")
    from bench import procrastinate_peer as peer
    peer.app.close()
    env.drop_database(pdb)
