"""Where the machine's CPU time goes during a measurement, by kind of process.

On this 2-core machine every figure that drains a queue keeps several processes busy at
once (the worker's main process, its pool processes, PostgreSQL backends, Redis), so a rate
alone cannot say what limited it. ``CpuMeter`` reads utime + stime from /proc before and
after, and ``per_item`` turns the difference into CPU milliseconds per message, per kind:
that sum, divided by the number of cores, is the floor of the time one item costs, and the
biggest column is the first place to cut. (Clock ticks are 10 ms: a drain of a few seconds
keeps the error well under 1 %.)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

_TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return int(fields[11]) + int(fields[12])  # utime, stime


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _snapshot(kinds: dict[int, str]) -> dict[int, tuple[str, int]]:
    """CPU ticks of every process we can classify: the named pids, PostgreSQL and Redis."""
    seen: dict[int, tuple[str, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        kind = kinds.get(pid)
        if kind is None:
            comm = _comm(pid)
            kind = "postgres" if comm.startswith("postgres") else "redis" if comm.startswith("redis") else None
        if kind is None:
            continue
        ticks = _cpu_ticks(pid)
        if ticks is not None:
            seen[pid] = (kind, ticks)
    return seen


class CpuMeter:
    """``with CpuMeter(kinds) as m: ...`` (or ``m.start()`` ... ``m.stop()``), then ``m.per_item(n)``.

    ``kinds`` maps pids to a label ("worker main", "pool"); PostgreSQL (every backend,
    the WAL writer, ...) and Redis are found by name. A process started inside the window
    counts from zero; one that ended inside it is lost (none does, in a drain).
    """

    def __init__(self, kinds: dict[int, str]) -> None:
        self.kinds = dict(kinds)
        self.kinds[os.getpid()] = "bench"
        self.before: dict[int, tuple[str, int]] = {}
        self.used: dict[str, float] = {}

    def __enter__(self) -> "CpuMeter":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.before = _snapshot(self.kinds)

    def stop(self) -> None:
        after = _snapshot(self.kinds)
        used: dict[str, float] = {}
        for pid, (kind, ticks) in after.items():
            start = self.before.get(pid, (kind, 0))[1]
            used[kind] = used.get(kind, 0.0) + (ticks - start) * _TICK_MS
        self.used = used

    def per_item(self, n: int) -> dict[str, float]:
        """CPU ms per item by kind, plus ``total``."""
        out = {kind: round(ms / n, 3) for kind, ms in sorted(self.used.items())}
        out["total"] = round(sum(self.used.values()) / n, 3)
        return out


def worker_kinds(main_pid: int, children: Iterable[int]) -> dict[int, str]:
    kinds = {pid: "pool" for pid in children}
    kinds[main_pid] = "worker main"
    return kinds
