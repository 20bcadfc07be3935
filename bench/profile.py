"""``--profile``: py-spy samples of a worker's processes while a figure is measured.

Samples include idle time (``--idle``), so "waiting for the next job" shows up next to
"waiting for PostgreSQL" and "building SQL", and the shares say what limits a figure.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

# Where a sample's innermost frames point, first match wins.
BUCKETS = (
    ("idle: waiting for the next task", ("_recv_bytes", "get_payload", "_epoll.poll", "poll (")),
    ("PostgreSQL: waiting on commit", ("do_commit", "_commit_gen")),
    ("PostgreSQL: pool pre-ping", ("do_ping",)),
    ("PostgreSQL: waiting on a statement", ("psycopg",)),
    ("SQLAlchemy: building/compiling", ("sqlalchemy",)),
    ("Redis/kombu: publish and ack", ("redis", "kombu")),
    ("Celery/billiard machinery", ("celery", "billiard")),
    ("wakeful code", ("/store/", "/tasks/")),
)


class Profiler:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []

    @staticmethod
    def available() -> bool:
        return _py_spy() is not None

    def start(self, label: str, pid: int, seconds: float) -> None:
        out = self.directory / f"spy-{label}-{pid}.txt"
        p = subprocess.Popen([_py_spy() or "py-spy", "record", "--idle", "-r", "200", "-d", str(max(1, int(seconds))),
                              "-f", "raw", "-o", str(out), "-p", str(pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append((label, p, out))

    def finish(self) -> dict[str, dict[str, float]]:
        shares: dict[str, dict[str, float]] = {}
        for label, p, out in self.procs:
            p.wait(120)
            buckets: Counter[str] = Counter()
            total = 0
            if out.exists():
                for line in out.read_text().splitlines():
                    stack, _, n = line.rpartition(" ")
                    total += int(n)
                    buckets[_bucket(stack)] += int(n)
            if total:
                merged = shares.setdefault(label, Counter())
                for k, v in buckets.items():
                    merged[k] += v
        return {label: {k: round(100 * v / sum(c.values()), 1) for k, v in c.most_common()}
                for label, c in shares.items()}


def _py_spy() -> str | None:
    """On PATH, or beside this interpreter (a virtualenv run without activating it)."""
    beside = Path(sys.executable).with_name("py-spy")
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


def _bucket(stack: str) -> str:
    frames = stack.split(";")
    inner = ";".join(frames[-3:])
    for name, needles in BUCKETS:
        if any(n in inner for n in needles):
            return name
    return "other: " + frames[-1].split(" (")[0][:60]
