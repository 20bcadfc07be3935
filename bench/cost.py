"""``commits_per_wake``, ``statements_per_wake``, ``redis_cmds_per_wake``: what one wake costs.

A wake here is one doorbell for an inbox holding one event, run to its end by the no-op
agent, on an otherwise idle system: each event is stored and rung once the previous wake is
done, so every ring sends its message (a backlog's rings are coalesced and its wakes taken from
the database: the drain figures and their CPU table cover that path). pg_stat_statements is not loaded on this server (it needs shared_preload_libraries
and a restart), so the database side is counted twice, independently:

- in the worker: SQLAlchemy engine events (every statement sent, every commit and rollback,
  every pool checkout, which with ``pool_pre_ping`` is one extra ``SELECT 1`` round trip),
  written per process by the bench agent at each counted run (bench/agents.py);
- on the server: ``pg_stat_database.xact_commit`` of the bench database across a fresh worker
  whose database sessions all end (and so flush their statistics) inside the window.

Redis commands are counted with ``MONITOR``, keeping only the bench's db number: the
doorbells sent and everything the worker does to receive, ack and run them.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import redis

from tasks.celeryconfig import RUNS_QUEUE

from bench import env
from bench.context import Context
from bench.queues import wait_drained

STOP = "bench-cost-stop"


def _worker_counts(directory: Path) -> dict[int, dict[str, int]]:
    return {int(p.stem): json.loads(p.read_text()) for p in directory.glob("*.json")}


def _commits(db: str) -> tuple[int, int]:
    row = env.sql(db, "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()")
    return row[0][0], row[0][1]


class Monitor(threading.Thread):
    """Counts the commands sent to one db number, except those of the ``ignore`` client."""

    def __init__(self, db: int, ignore: str) -> None:
        super().__init__(daemon=True)
        self.db = db
        self.ignore = ignore
        self.commands: Counter[str] = Counter()
        self.ready = threading.Event()

    def run(self) -> None:
        r = env.redis_client()
        with r.monitor() as m:
            self.ready.set()
            while True:
                cmd = m.next_command()
                if int(cmd.get("db", -1)) != self.db or cmd.get("client_address", "") + ":" + str(cmd.get("client_port", "")) == self.ignore:
                    continue
                text = cmd.get("command", "")
                if STOP in text:
                    return
                self.commands[text.split(" ", 1)[0].upper()] += 1


def run(ctx: Context, start_worker) -> None:
    count_dir = ctx.home / "counts"
    count_dir.mkdir(exist_ok=True)
    n = ctx.sizes.cost_wakes
    # A fresh worker: its database sessions open and close inside the window below.
    ctx.wakeful_worker.stop()
    time.sleep(0.5)
    commits0, rollbacks0 = _commits(ctx.main_db)
    worker = start_worker(BENCH_COUNT_DIR=str(count_dir))
    # The bench's own polling goes through one connection whose commands are not counted.
    r = redis.Redis.from_url(env.REDIS_URL, single_connection_client=True)
    from tasks.doorbell import ring

    polls = {"n": 0}  # the bench's own transactions (an ingest, a status read): one commit each
    reader = psycopg.connect(env.pg_conninfo(ctx.main_db), autocommit=True)

    def done(i: int) -> bool:
        polls["n"] += 1
        return reader.execute("SELECT status FROM events WHERE inbox = %s", [f"cost-{i}"]).fetchone()[0] == "done"

    def wake(i: int) -> None:
        polls["n"] += 1  # stored as the store would, in one autocommit statement
        reader.execute("INSERT INTO events (inbox, source, source_id, payload, created)"
                       " VALUES (%s, 'cost', %s, '{\"count\": true}', extract(epoch FROM now())::bigint)",
                       [f"cost-{i}", f"e-{i}"])
        ring(f"cost-{i}")
        deadline = time.monotonic() + 30
        while not done(i):
            if time.monotonic() > deadline:
                raise TimeoutError(f"cost: the wake of cost-{i} not done in 30 s")
            time.sleep(0.002)

    # Warm-up wakes: every pool process has run the agent (listeners installed) before the count.
    for i in range(n, n + 50):
        wake(i)
    before = _worker_counts(count_dir)
    if len(before) < env.CONCURRENCY:
        ctx.progress(f"cost: only {len(before)} pool processes ran a warm-up wake")
    monitor = Monitor(int(env.REDIS_URL.rsplit("/", 1)[1] or 0), r.client_info()["addr"])
    monitor.start()
    monitor.ready.wait(5)
    time.sleep(0.05)
    for i in range(n):
        wake(i)
    wait_drained(r, RUNS_QUEUE, 120, poll=0.05)
    env.redis_client().echo(STOP)
    monitor.join(10)
    after = _worker_counts(count_dir)
    reader.close()
    worker.stop()  # its database sessions end: their statistics are flushed
    ctx.wakeful_worker = start_worker()
    time.sleep(1.0)
    commits1, rollbacks1 = _commits(ctx.main_db)

    delta = Counter()
    for pid, totals in after.items():
        base = before.get(pid, {k: 0 for k in totals})
        for k, v in totals.items():
            delta[k] += v - base.get(k, 0)
    wakes = delta["calls"]
    if wakes != n:
        ctx.progress(f"cost: counted {wakes} wakes, expected {n}")
    res = ctx.results
    res.add("commits_per_wake", delta["commits"] / wakes)
    res.add("statements_per_wake", delta["statements"] / wakes)
    res.add("checkouts_per_wake", delta["checkouts"] / wakes)
    res.add("rollbacks_per_wake", delta["rollbacks"] / wakes)
    redis_total = sum(monitor.commands.values())
    res.add("redis_cmds_per_wake", redis_total / n)
    # The server's view covers the warm-up wakes and each session's connect too, and the
    # bench's own ingests and status polls (one transaction each: taken off below).
    server = (commits1 - commits0 - 1 - polls["n"]) / (n + 50)
    res.add("pg_xact_commit_per_wake", server)
    res.notes["redis_commands"] = {k: round(v / n, 2) for k, v in monitor.commands.most_common()}
    res.notes["cost_method"] = ("statements/commits: SQLAlchemy engine events in the worker "
                                "(pg_stat_statements not loaded); cross-check: pg_stat_database "
                                "xact_commit; Redis: MONITOR filtered to the bench db")
    ctx.progress(f"cost: {delta['commits'] / wakes:.2f} commits, {delta['statements'] / wakes:.1f} statements, "
                 f"{delta['checkouts'] / wakes:.2f} pool checkouts (pre-ping), {redis_total / n:.1f} Redis commands "
                 f"per wake; server xact_commit {server:.2f}/wake; redis: {res.notes['redis_commands']}")
