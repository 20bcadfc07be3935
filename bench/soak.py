"""``python -m bench.soak --minutes N [--json]``: the fault scenarios, with random faults, for N minutes.

Runs the scenarios of ``tests/faults/scenarios.py`` (the same code CI runs in its short
versions) in a random order, round after round, each on a fresh PostgreSQL database and a
private redis-server, with random fault parameters (which fault points, at which reach,
where in the burst Redis is flushed, when connections are cut) and a random load scale.
After each scenario drains, the checker counts; at the end the sum per scenario is printed
as a table (or JSON): every violation count must be 0.

Needs PostgreSQL (``WAKEFUL_TEST_PG_URL``, default postgresql+psycopg://postgres@127.0.0.1:5432/postgres)
and ``redis-server`` on the PATH. Exit status 1 when any count is non-zero or a scenario failed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import traceback
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "faults"))
sys.path.insert(0, str(ROOT / "tests"))

import scenarios  # noqa: E402
from checker import COUNTS  # noqa: E402
from harness import PrivateRedis, Stack  # noqa: E402


def _database(name: str) -> str:
    from databases import create_pg_database  # tests/databases.py

    url = create_pg_database(name)
    from store import Store

    store = Store.connect(url)
    store.migrate()
    store.dispose()
    return url


def _drop(name: str) -> None:
    from databases import drop_pg_database

    drop_pg_database(name)


def run_one(name: str, rng: random.Random, scale: int, workdir: Path
            ) -> tuple[scenarios.Result | None, str, list[str]]:
    """One scenario on a fresh database and Redis: (result or None, error, crashes), where
    crashes are processes that died on their own and were restarted (as a supervisor would)."""
    db = f"wakeful_soak_{uuid.uuid4().hex[:10]}"
    url = _database(db)
    redis = PrivateRedis(workdir / "redis")
    redis.start()
    stacks: list[Stack] = []

    def make_stack(**env: str) -> Stack:
        stack = Stack(workdir / f"home{len(stacks)}", url, redis.url, overrides=env)
        stacks.append(stack)
        return stack

    kwargs: dict[str, Any] = {}
    fn = scenarios.SCENARIOS[name]
    if fn is scenarios.redis_flush_restart:
        kwargs["redis"] = redis
    if fn is scenarios.hot_inbox:  # the size at scale 2: 10,000 events, 100 others
        kwargs.update(hot_events=5000, light_inboxes=100)
    if fn is scenarios.kill_at_points:
        points = list(scenarios.RUN_POINTS + scenarios.CONTROL_POINTS)
        kwargs["points"] = tuple(rng.sample(points, rng.randint(2, len(points))))
    crashes: list[str] = []
    try:
        result = fn(make_stack, rng, scale, **kwargs)
        crashes = [c for stack in stacks for c in stack.crashes]
        return result, "", crashes
    except Exception as exc:  # noqa: BLE001 - a scenario that failed to drain is a finding
        logs = stacks[-1].logs(1500) if stacks else ""
        crashes = [c for stack in stacks for c in stack.crashes]
        return None, f"{type(exc).__name__}: {str(exc)[:2000]}\n{traceback.format_exc()[-1500:]}\n{logs[-3000:]}", crashes
    finally:
        for stack in stacks:
            stack.close()
        redis.stop()
        try:
            _drop(db)
        except Exception:  # noqa: BLE001
            pass


def soak(minutes: float, seed: int, max_scale: int, show: bool,
         names: list[str] | None = None) -> dict[str, Any]:
    rng = random.Random(seed)
    deadline = time.monotonic() + minutes * 60
    started = time.monotonic()
    totals: dict[str, dict[str, Any]] = {}
    failures: list[dict[str, str]] = []
    n = 0
    names = names or list(scenarios.SCENARIOS)
    while time.monotonic() < deadline:
        order = names[:]
        rng.shuffle(order)
        for name in order:
            if time.monotonic() >= deadline:
                break
            n += 1
            scale = rng.randint(1, max_scale)
            t0 = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="wakeful-soak-") as tmp:
                result, error, crashes = run_one(name, random.Random(rng.random()), scale, Path(tmp))
            took = time.monotonic() - t0
            row = totals.setdefault(name, {"runs": 0, "failed": 0, "seconds": 0.0,
                                           "injected": defaultdict(int), "counts": defaultdict(int),
                                           "measured": [], "crashes": []})
            row["runs"] += 1
            row["crashes"] += crashes
            row["seconds"] += took
            if result is None:
                row["failed"] += 1
                failures.append({"scenario": name, "error": error})
                status = "FAILED (did not drain or errored)"
            else:
                for k, v in result.counts.items():
                    row["counts"][k] += v - result.expected.get(k, 0)
                for k, v in result.injected.items():
                    row["injected"][k] += v
                row["measured"].append(result.measured)
                bad = result.violations()
                status = "ok" if not bad else f"VIOLATIONS {bad}"
                if crashes:
                    status += f" ({len(crashes)} process(es) died and were restarted)"
            if show:
                elapsed = time.monotonic() - started
                print(f"[{_mmss(elapsed)}/{_mmss(minutes * 60)}] #{n} {name} (scale {scale}): "
                      f"{status} in {took:.0f}s", file=sys.stderr, flush=True)
    return {"minutes": minutes, "seed": seed, "wall_seconds": round(time.monotonic() - started),
            "scenarios": {k: {**v, "injected": dict(v["injected"]), "counts": dict(v["counts"]),
                              "seconds": round(v["seconds"])} for k, v in totals.items()},
            "failures": failures}


def _mmss(seconds: float) -> str:
    return f"{int(seconds) // 60:02d}:{int(seconds) % 60:02d}"


def render(report: dict[str, Any]) -> str:
    core = list(COUNTS)
    lines = [f"wakeful soak: {report['minutes']} min, seed {report['seed']}, "
             f"{sum(s['runs'] for s in report['scenarios'].values())} scenario runs, "
             f"{report['wall_seconds']} s", ""]
    head = ["scenario", "runs", "failed", "faults injected", *core, "other checks",
            "processes died (restarted)"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for name in scenarios.SCENARIOS:
        s = report["scenarios"].get(name)
        if s is None:
            continue
        injected = ", ".join(f"{k} {v}" for k, v in s["injected"].items()) or "-"
        other = sum(v for k, v in s["counts"].items() if k not in core)
        cells = [name, s["runs"], s["failed"], injected, *(s["counts"].get(c, 0) for c in core), other,
                 len(s["crashes"])]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    for name, s in report["scenarios"].items():
        for crash in sorted(set(c.split(": ", 1)[-1][:200] for c in s["crashes"])):
            lines += ["", f"{name}: a process died on its own: {crash}"]
    for f in report["failures"]:
        lines += ["", f"FAILED {f['scenario']}:", f["error"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-scale", type=int, default=2, help="loads up to this many times CI's")
    parser.add_argument("--only", action="append", default=None, metavar="N",
                        help="only the scenarios whose name starts with N (e.g. --only 6)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    names = [n for n in scenarios.SCENARIOS
             if not args.only or any(n.split()[0] == o for o in args.only)]
    report = soak(args.minutes, seed, args.max_scale, show=True, names=names)
    print(json.dumps(report, indent=2, default=str) if args.json else render(report))
    clean = not report["failures"] and all(v == 0 for s in report["scenarios"].values()
                                           for v in s["counts"].values())
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
