"""``python -m bench.wakepath``: what one wake costs on the store side, in this process,
for the run loop in tasks/ and for the store calls it can be built from.

No worker (do not run it beside ``python -m bench``: it rings doorbells on the bench's
Redis db and then deletes them): each variant runs N single-event wakes back to back against a fresh
bench database, counting statements, commits and pool checkouts with SQLAlchemy events, and
timing the whole wake and the part before the agent is called. It is the evidence behind
the recommendations in docs/performance.md, not one of issue 5's figures.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import Pool

from bench import env

DB = "wakeful_bench_wakepath"
counts: Counter[str] = Counter()


def _install() -> None:
    event.listen(Engine, "before_cursor_execute", lambda *a, **k: counts.update(["statements"]))
    event.listen(Engine, "commit", lambda *a, **k: counts.update(["commits"]))
    event.listen(Pool, "checkout", lambda *a, **k: counts.update(["checkouts"]))


def today(store, inbox: str, agent) -> float:
    """tasks.run_inbox.run_inbox as checked out, with this process's store and agent."""
    from tasks import run_inbox

    run_inbox.get_store = lambda: store  # this process's store, not the environment's
    run_inbox._agent = agent
    run_inbox.run_inbox(inbox)
    return agent.called_at


def combined(store, inbox: str, agent) -> float:
    """store.runs.start (acquire + claim + memory), agent, finish_and_claim (finish + release)."""
    from store import Outcome
    from wakeful.agent import Run

    holder = f"bench:{os.getpid()}"
    start = store.runs.start(inbox, holder)
    gen, events, memory = start.generation, start.events, start.memory
    while events:
        run = Run(inbox=inbox, events=events, generation=gen, memory=memory)
        outcome = agent(run) or Outcome()
        step = store.runs.finish_and_claim(inbox, holder, gen, [e.id for e in events], outcome=outcome)
        events, memory = step.events, step.memory
    return agent.called_at


def pinned(store, inbox: str, agent) -> float:
    """``combined`` on one pinned connection, as tasks.run_inbox does it."""
    with store.transactions.pinned():
        return combined(store, inbox, agent)


class Agent:
    called_at = 0.0

    def __call__(self, run):
        Agent.called_at = time.perf_counter()
        return None


def measure(store, loop, n: int, tag: str) -> dict[str, float]:
    store.intake.ingest_many([(f"{tag}-{i}", "wakepath", f"e{time.time()}", {}) for i in range(n + 20)])
    agent = Agent()
    for i in range(n, n + 20):
        loop(store, f"{tag}-{i}", agent)  # warm-up
    counts.clear()
    wake, to_agent = [], []
    for i in range(n):
        start = time.perf_counter()
        called = loop(store, f"{tag}-{i}", agent)
        wake.append((time.perf_counter() - start) * 1000)
        to_agent.append((called - start) * 1000)
    return {"wake_ms_p50": statistics.median(wake), "to_agent_ms_p50": statistics.median(to_agent),
            **{k: v / n for k, v in counts.items()}}


def drained(store, n: int, tag: str) -> dict[str, float]:
    """A draining task's wakes without the agent and the doorbell: each finish that releases
    its inbox takes the next one from the backlog in its transaction (``take_next``)."""
    store.intake.ingest_many([(f"{tag}-{i}", "wakepath", "e", {}) for i in range(n + 20)])
    holder = f"bench:{os.getpid()}"
    times = []
    with store.transactions.pinned():
        got = store.runs.start_next(holder)
        for i in range(n + 20):
            if got is None:
                raise RuntimeError(f"the backlog ran dry after {i} wakes")
            if i == 20:
                counts.clear()  # after the warm-up
            inbox, start = got
            began = time.perf_counter()
            step = store.runs.finish_and_claim(inbox, holder, start.generation, [e.id for e in start.events],
                                               take_next=[])
            times.append((time.perf_counter() - began) * 1000)
            got = step.next
    return {"wake_ms_p50": statistics.median(times[20:]), "to_agent_ms_p50": 0.0,
            **{k: v / n for k, v in counts.items()}}


def ingest_parts(pinged, unpinged, n: int) -> list[tuple[str, float, float]]:
    """(what, ms p50, statements) for the pieces of the wakeful.ingest task body."""
    from tasks.doorbell import ring
    from tasks import ingest as ingest_task
    from tasks.batches import BatchItem

    def timed(fn) -> tuple[float, float]:
        for i in range(20):
            fn(f"warm{i}")
        counts.clear()
        times = []
        for i in range(n):
            start = time.perf_counter()
            fn(str(i))
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times), counts["statements"] / n

    ingest_task.get_store = lambda: pinged
    out = [
        ("Store.ingest (pool_pre_ping)", *timed(lambda k: pinged.ingest("ing", "p", k, {}))),
        ("Store.ingest (no pre-ping)", *timed(lambda k: unpinged.ingest("ing", "u", k, {}))),
        ("doorbell ring (send_task to Redis)", *timed(lambda k: ring("ing"))),
        ("wakeful.ingest task body, a batch of one (store + ring)",
         *timed(lambda k: ingest_task.ingest.run([BatchItem(f"wakepath-{k}", ("ing", "t", k, {}), {}, ignore_result=True)]))),
    ]
    env.redis_client().delete("wakeful.runs")  # the doorbells rung above: nobody runs them
    return out


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    home = Path(tempfile.mkdtemp(prefix="wakeful-wakepath-"))
    url = env.sqlalchemy_url(DB)
    os.environ.update(env.base_env(home, WAKEFUL_DATABASE_URL=url, WAKEFUL_AGENT="bench.agents:agent"))
    env.create_database(DB)
    from store import Store

    try:
        Store.connect(url).migrate()
        _install()
        from tasks.doorbell import QUEUED_MARKER

        env.redis_client().delete(QUEUED_MARKER)  # one left over would make run_inbox drain
        pinged = Store.connect(url, pool_size=1)
        unpinged = Store(create_engine(url, pool_size=1, pool_pre_ping=False), pinged.settings)
        rows = [
            ("tasks.run_inbox.run_inbox as checked out (pool_pre_ping)", measure(pinged, today, n, "a")),
            ("store.runs.start + finish_and_claim (pool_pre_ping)", measure(pinged, combined, n, "b")),
            ("store.runs.start + finish_and_claim, one pinned connection", measure(pinged, pinned, n, "d")),
            ("store.runs.start + finish_and_claim (no pre-ping)", measure(unpinged, combined, n, "c")),
            ("a drained wake: finish_and_claim(take_next=...), pinned", drained(pinged, n, "e")),
        ]
        print(f"| store side of one wake, {n} wakes, 1 event each | wake ms p50 | to agent ms p50 | "
              "statements | commits | pool checkouts |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, r in rows:
            print(f"| {name} | {r['wake_ms_p50']:.2f} | {r['to_agent_ms_p50']:.2f} | {r.get('statements', 0):.1f} | "
                  f"{r.get('commits', 0):.2f} | {r.get('checkouts', 0):.2f} |")
        print()
        print(f"| the wakeful.ingest task body, {n} calls | ms p50 | statements |")
        print("|---|---:|---:|")
        for name, ms, statements in ingest_parts(pinged, unpinged, n):
            print(f"| {name} | {ms:.2f} | {statements:.1f} |")
        pinged.dispose()
        unpinged.dispose()
    finally:
        env.drop_database(DB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
