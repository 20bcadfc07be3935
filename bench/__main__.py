"""``python -m bench [--quick] [--json PATH] [--only SECTION ...]``

Runs wakeful side by side with its peers (raw Celery, pgbench, procrastinate, DBOS) on loopback
PostgreSQL and Redis, three runs per figure, and prints medians and ratios. See
docs/performance.md for what each figure means and how it is taken.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

SECTIONS = ("agents", "ingest", "inserts", "drain", "latency", "web", "cost", "scan", "backlog", "pgbouncer")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: about a minute")
    parser.add_argument("--json", type=Path, help="write the medians, ratios and samples here")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    parser.add_argument("--profile", action="store_true",
                        help="after the drain figures, one more drain under py-spy (not counted)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory and logs")
    parser.add_argument("--agents-pool", default="threads",
                        help="agents section: the run worker's Celery pool (and the Celery peer's); default threads")
    parser.add_argument("--agents-concurrency", type=int, default=1200,
                        help="agents section: the run worker's concurrency (and the peer's); default 1200, so "
                             ">= 1,000 runs can be in flight at L = 10 s")
    parser.add_argument("--agents-processes", type=int, default=1, metavar="K",
                        help="agents section: the run worker as K processes sharing the concurrency (and the "
                             "peer likewise); default 1: what a second interpreter on the box buys "
                             "(docs/performance.md, '3 December, afternoon')")
    parser.add_argument("--agents-forms", nargs="+",
                        choices=("sleep", "async-sleep", "claude", "proxy", "before", "dbos", "procrastinate"),
                        help="agents section: only these forms (default all; peers run with the forms they serve: "
                             "Celery with sleep and async-sleep, the asyncio limit with every form but before; "
                             "dbos and procrastinate are the durable peers, each a form of its own)")
    parser.add_argument("--agents-dbos-poll", type=float, metavar="S",
                        help="agents section: the DBOS peer's queue polling interval in seconds (default DBOS's "
                             "own, 1.0)")
    parser.add_argument("--agents-waits", nargs="+", type=float, metavar="L",
                        help="agents section: the agent's waits in seconds (default 2 10; --quick 2)")
    parser.add_argument("--agents-inboxes", type=int, metavar="N",
                        help="agents section: N inboxes for every wait (default 1,000 at 2 s, 1,200 at 10 s; --quick 400)")
    args = parser.parse_args(argv)

    from bench import env

    with env.bench_redis_db():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from bench import env
    from bench.context import Context, Progress, Results, Sizes
    from bench.waiting import AgentSizes

    home = Path(tempfile.mkdtemp(prefix="wakeful-bench-"))
    main_db = "wakeful_bench_main"
    # Before any app loads its settings: the workers and this process share one config.
    os.environ.update(env.base_env(home, WAKEFUL_DATABASE_URL=env.sqlalchemy_url(main_db),
                                   WAKEFUL_AGENT="bench.agents:agent"))
    ctx = Context(sizes=Sizes.quick() if args.quick else Sizes.full(), home=home,
                  results=Results(), progress=Progress(), main_db=main_db, profile=args.profile,
                  agent_sizes=AgentSizes.quick().but(args.agents_waits, args.agents_inboxes) if args.quick
                  else AgentSizes.full().but(args.agents_waits, args.agents_inboxes),
                  agents_pool=args.agents_pool, agents_concurrency=args.agents_concurrency,
                  agents_processes=max(1, args.agents_processes),
                  agents_forms=tuple(args.agents_forms or ()))
    ctx.agents_dbos_poll = args.agents_dbos_poll  # read by bench/waiting.py (getattr: optional)
    sections = args.only or SECTIONS
    ctx.progress(f"wakeful bench ({'quick' if args.quick else 'full'}): {', '.join(sections)}; work dir {home}")
    workers = []
    try:
        env.create_database(main_db)
        from store import Store

        store = Store.connect(env.sqlalchemy_url(main_db), pool_size=1)
        store.migrate()
        store.dispose()
        env.flush_redis()

        import tasks
        from bench import peer
        from tasks.celeryconfig import DEFAULT_QUEUE, RUNS_QUEUE

        ctx.wakeful_app, ctx.peer_app = tasks.app, peer.app
        worker_env = dict(os.environ)

        def start_wakeful(**extra: str):
            w = env.Worker(f"wakeful{len(workers)}", "tasks", (DEFAULT_QUEUE, RUNS_QUEUE),
                           dict(worker_env, **extra), home)
            workers.append(w)
            w.start().wait_ready(ctx.wakeful_app.control)
            return w

        ctx.progress("starting workers (prefork x2, prefetch 1, late acks) ...")
        ctx.peer_worker = env.Worker("celery-peer", "bench.peer", (peer.QUEUE,), worker_env, home).start()
        workers.append(ctx.peer_worker)
        ctx.wakeful_worker = start_wakeful()
        ctx.peer_worker.wait_ready(ctx.peer_app.control)

        from bench import backlog, cost, drain, inserts, latency, scan, throughput

        for name in sections:
            started = time.monotonic()
            if name == "agents":
                from bench import waiting

                waiting.run(ctx)
            elif name == "ingest":
                throughput.run(ctx)
            elif name == "inserts":
                inserts.run(ctx)
            elif name == "drain":
                drain.run(ctx)
            elif name == "latency":
                if ctx.results.median("ingest_per_s") is None or ctx.results.median("events_per_s_1") is None:
                    ctx.progress("latency at half load needs the ingest and drain figures: unloaded only")
                    _latency_unloaded_only(ctx, latency)
                else:
                    latency.run(ctx)
                latency.curve(ctx)
            elif name == "cost":
                cost.run(ctx, start_wakeful)
            elif name == "scan":
                scan.run(ctx)
            elif name == "backlog":
                drain.alone_on_runs(ctx, lambda: backlog.run(ctx))
            elif name == "web":
                from bench import web

                web.run(ctx)
            elif name == "pgbouncer":
                from bench import pgbouncer

                try:
                    pgbouncer.run(ctx)
                except env.PeerMissing as exc:
                    ctx.progress(f"{name} skipped: {exc}")
                    continue
            ctx.progress(f"{name} done in {time.monotonic() - started:.1f}s")
        for w in workers:
            w.sample_rss()
    finally:
        for w in workers:
            w.stop()
        _record_rss(ctx, workers)
        try:
            env.flush_redis()
            env.drop_database(main_db)
        except Exception as exc:  # cleanup must not hide the real error
            print(f"cleanup: {exc}", file=sys.stderr)
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)

    from bench.report import table, write_json

    text, data = table(ctx.results)
    data["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "quick": args.quick, "sections": list(sections),
                       "load_average_at_end": os.getloadavg()}
    data["sizes"] = dataclasses.asdict(ctx.sizes)
    if args.quick:
        print("\n(--quick: scaled-down sizes, see \"sizes\" in the JSON; publish a full run)")
    print(text)
    if args.json:
        write_json(args.json, data)
        ctx.progress(f"wrote {args.json}")
    return 0


def _latency_unloaded_only(ctx, latency) -> None:
    for rep in range(ctx.sizes.reps):
        for kind, prefix in (("wakeful", "wake"), ("peer", "celery")):
            s = latency.unloaded(ctx, kind, ctx.sizes.probes)
            ctx.results.add(f"{prefix}_p50_ms", latency.percentile(s, 50))
            ctx.results.add(f"{prefix}_p99_ms", latency.percentile(s, 99))
            if kind == "wakeful":
                latency.parts(ctx)


def _record_rss(ctx, workers) -> None:
    wakeful = [w.peak_rss_mb() for w in workers if w.app == "tasks" and w.peak_rss_kb]
    peer = [w.peak_rss_mb() for w in workers if w.app != "tasks" and w.peak_rss_kb]
    if wakeful:
        ctx.results.add("worker_rss_mb", max(wakeful))
    if peer:
        ctx.results.add("celery_worker_rss_mb", max(peer))


if __name__ == "__main__":
    sys.exit(main())
