"""The bench's shared state: settings for this run, databases, workers, progress output."""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Sizes:
    reps: int
    ingest_n: int          # task messages per ingest / no-op throughput run
    insert_seconds: float  # duration of one ingest_many / pgbench run
    batch: int             # rows per ingest_many call (and per pgbench batched statement)
    drain_rounds: int      # 1,000-inbox backlogs per events_per_s_1 run
    drain_inboxes_1: int   # inboxes of the 1-event-per-wake backlog (1,000; fewer in --quick)
    drain_inboxes_10: int  # inboxes of the 10-events-per-wake backlog (1,000; fewer in --quick)
    procrastinate_jobs: int
    probes: int            # unloaded latency samples per run
    load_seconds: float    # duration of one half-load latency run (at least load_samples)
    load_samples: int
    cost_wakes: int
    scan_due: int
    scan_small: int
    scan_large: int
    backlog_inboxes: int   # one event each, drained with and without doorbells (bench/backlog.py)
    backlog_reps: int      # runs of that pair (the full run's 100,000-inbox pair takes ~10 minutes)
    hot_events: int        # events in the hot inbox, and over 1,000 inboxes for comparison

    @classmethod
    def quick(cls) -> "Sizes":
        # Scaled down to fit about a minute (once a wake is lean; longer today): fewer inboxes
        # and jobs, the scan at a tenth of the size with the same 1:100 ratio of due timers to
        # all. Use the full run for published figures.
        return cls(reps=3, ingest_n=600, insert_seconds=1.0, batch=100, drain_rounds=1,
                   drain_inboxes_1=300, drain_inboxes_10=100, procrastinate_jobs=300, probes=50,
                   load_seconds=1.0, load_samples=40, cost_wakes=100, scan_due=1_000,
                   scan_small=1_000, scan_large=100_000, backlog_inboxes=3_000, backlog_reps=3, hot_events=2_000)

    @classmethod
    def full(cls) -> "Sizes":
        return cls(reps=3, ingest_n=3000, insert_seconds=4.0, batch=100, drain_rounds=2,
                   drain_inboxes_1=1000, drain_inboxes_10=1000, load_samples=100, procrastinate_jobs=2000, probes=300, load_seconds=5.0, cost_wakes=1000,
                   scan_due=10_000, scan_small=10_000, scan_large=1_000_000, backlog_inboxes=100_000, backlog_reps=1,
                   hot_events=10_000)


@dataclass
class Results:
    samples: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def add(self, key: str, value: float) -> None:
        self.samples.setdefault(key, []).append(float(value))

    def median(self, key: str) -> float | None:
        values = self.samples.get(key)
        return statistics.median(values) if values else None


class Progress:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        print(f"[{time.monotonic() - self.start:6.1f}s] {message}", file=sys.stderr, flush=True)


@dataclass
class Context:
    sizes: Sizes
    home: Path
    results: Results
    progress: Progress
    main_db: str = ""
    wakeful_app: Any = None
    peer_app: Any = None
    wakeful_worker: Any = None
    peer_worker: Any = None
    profile: bool = False
    # The agents section (bench/waiting.py): its sizes, and the run worker's pool and
    # concurrency (the Celery peer gets the same), and which of its forms to run.
    agent_sizes: Any = None
    agents_pool: str = "threads"
    agents_concurrency: int = 1200
    agents_processes: int = 1
    agents_forms: tuple[str, ...] = ()
