"""``wake_p50/p99_ms`` against ``celery_p50/p99_ms``: from the ``wakeful.ingest`` call to the
agent being called (two hops: ingest, then the doorbell's run), against Celery send ->
task start of a one-hop task on the same broker and worker shape; unloaded (one probe at a
time) and at half of peak load (a paced background load from a separate process)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time

from bench import env, peer
from bench.context import Context
from bench.probe import LATENCY_KEY, PARTS_KEY

_serial = itertools.count()


def send_probe(ctx: Context, kind: str, n: int) -> None:
    now = time.time()
    if kind == "wakeful":
        ctx.wakeful_app.send_task("wakeful.ingest", kwargs={
            "inbox": f"probe-{n % 1000}", "source": "probe", "source_id": f"{os.getpid()}-{next(_serial)}",
            "payload": {"sent": now}})
    else:
        ctx.peer_app.send_task("bench.probe", args=[now], queue=peer.QUEUE)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def parts(ctx: Context) -> None:
    """Split of the wake latency: ingest call -> run task started, run task -> agent called."""
    r = env.redis_client()
    rows = [tuple(float(x) * 1000 for x in v.split()) for v in r.lrange(PARTS_KEY, 0, -1)]
    r.delete(PARTS_KEY)
    if rows:
        for n, name in enumerate(("to_run_task", "run_task_to_agent")):
            values = [row[n] for row in rows]
            ctx.results.add(f"wake_{name}_p50_ms", percentile(values, 50))


def unloaded(ctx: Context, kind: str, probes: int) -> list[float]:
    r = env.redis_client()
    r.delete(LATENCY_KEY, PARTS_KEY)
    samples = []
    for i in range(probes):
        send_probe(ctx, kind, i)
        got = r.blpop([LATENCY_KEY], timeout=10)
        if got is None:
            raise TimeoutError(f"{kind} probe {i} never reached the wakeful/agent/task")
        samples.append(float(got[1]) * 1000)
        time.sleep(0.002)
    return samples


def loaded(ctx: Context, kind: str, rate: float, seconds: float) -> list[float]:
    """Every message of the paced load is a probe: the samples are the load itself."""
    r = env.redis_client()
    r.delete(LATENCY_KEY)
    seconds = max(seconds, ctx.sizes.load_samples / rate)
    done = subprocess.run([sys.executable, "-m", "bench.loader", kind, str(rate), str(seconds)],
                          env=dict(os.environ), cwd=env.ROOT, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode:
        raise RuntimeError(f"the {kind} load generator failed: {done.stderr[-2000:]}")
    sent = int(done.stdout.split()[-1])
    samples = []
    while len(samples) < sent:
        got = r.blpop([LATENCY_KEY], timeout=30)
        if got is None:
            raise TimeoutError(f"{sent - len(samples)} {kind} probes lost under load")
        samples.append(float(got[1]) * 1000)
    return samples


def run(ctx: Context) -> None:
    res = ctx.results
    for kind in ("wakeful", "peer"):
        unloaded(ctx, kind, 30)  # warm-up
    for rep in range(ctx.sizes.reps):
        for kind, prefix in (("wakeful", "wake"), ("peer", "celery")):
            s = unloaded(ctx, kind, ctx.sizes.probes)
            res.add(f"{prefix}_p50_ms", percentile(s, 50))
            res.add(f"{prefix}_p99_ms", percentile(s, 99))
            if kind == "wakeful":
                parts(ctx)
        ctx.progress(f"latency {rep + 1}/{ctx.sizes.reps} unloaded: wake p50 {res.samples['wake_p50_ms'][-1]:.2f} ms "
                     f"p99 {res.samples['wake_p99_ms'][-1]:.2f} ms; celery p50 {res.samples['celery_p50_ms'][-1]:.2f} ms "
                     f"p99 {res.samples['celery_p99_ms'][-1]:.2f} ms")
    # Half of each side's peak: for wakeful the peak of the whole path (ingest, then a wake
    # with one event) on these two processes; for Celery its no-op peak.
    ingest, one, noop = res.median("ingest_per_s"), res.median("events_per_s_1"), res.median("celery_noop_per_s")
    wake_rate = 0.5 / (1 / ingest + 1 / one)
    peer_rate = 0.5 * noop
    res.notes["half_load_per_s"] = {"wakeful": round(wake_rate), "celery": round(peer_rate)}
    for rep in range(ctx.sizes.reps):
        for kind, prefix, rate in (("wakeful", "wake", wake_rate), ("peer", "celery", peer_rate)):
            s = loaded(ctx, kind, rate, ctx.sizes.load_seconds)
            res.add(f"{prefix}_p50_ms_half_load", percentile(s, 50))
            res.add(f"{prefix}_p99_ms_half_load", percentile(s, 99))
        ctx.progress(f"latency {rep + 1}/{ctx.sizes.reps} at half load ({wake_rate:,.0f}/s vs {peer_rate:,.0f}/s): "
                     f"wake p99 {res.samples['wake_p99_ms_half_load'][-1]:.2f} ms, "
                     f"celery p99 {res.samples['celery_p99_ms_half_load'][-1]:.2f} ms")


def curve(ctx: Context) -> None:
    """``BENCH_LOAD_RATES=20,60,120``: ingest -> agent called at each of these paced rates
    (events/s), one run each, into the JSON's notes (``wake_latency_by_rate``): where the
    latency leaves the unloaded figure, apart from how "half load" is defined."""
    rates = [float(r) for r in os.environ.get("BENCH_LOAD_RATES", "").split(",") if r.strip()]
    for rate in rates:
        s = loaded(ctx, "wakeful", rate, ctx.sizes.load_seconds)
        p50, p99 = percentile(s, 50), percentile(s, 99)
        ctx.results.notes.setdefault("wake_latency_by_rate", {})[f"{rate:g}/s"] = {"p50_ms": round(p50, 1),
                                                                                  "p99_ms": round(p99, 1)}
        ctx.progress(f"latency at {rate:g} events/s: p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(s)} samples)")
