"""The bench agent (``WAKEFUL_AGENT=bench.agents:agent``): it does nothing an agent would,
so what is measured is wakeful's own cost around a run.

- With an ordinary payload it returns nothing (an empty Outcome): the throughput figures.
- For each event carrying ``sent`` (the wall-clock time of the ingest call) it records how
  long it took until the agent was called: the wake-latency figures.
- For a run whose events carry ``count``, it counts the SQL statements and commits this
  worker process sends through SQLAlchemy (listeners installed on the first such run) and
  writes the running totals to a file per process, so the difference between two counted
  calls is exactly the cost of the wakes between them.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from bench.probe import record_latency, record_parts

# When this process's current wakeful.run_inbox task started (time.time()), to split a
# wake's latency into "reaching the run task" and "the store's work before the agent".
_task_started: dict[str, float] = {}


def _on_prerun(sender: Any = None, task: Any = None, args: Any = None, **_k: Any) -> None:
    if getattr(task, "name", "") == "wakeful.run_inbox" and args:
        _task_started["run"] = time.time()


try:
    from celery.signals import task_prerun

    task_prerun.connect(_on_prerun, weak=False)
except ImportError:  # pragma: no cover - the bench always has celery
    pass


def agent(run: Any) -> None:
    now = time.time()
    counted = False
    for event in run.events:
        payload = event.payload or {}
        body = payload.get("body")  # a webhook as the web edge stores it: {"type", "body"}
        sent = payload.get("sent", body.get("sent") if isinstance(body, dict) else None)
        if sent is not None:
            record_latency(now - sent)
            started = _task_started.get("run")
            if started is not None and started >= sent:
                record_parts(started - sent, now - started)
        counted = counted or bool(payload.get("count"))
    if counted:
        _write_counts()
    return None


_counts = {"calls": 0, "statements": 0, "commits": 0, "rollbacks": 0, "checkouts": 0}
_listening = False


def _listen() -> None:
    global _listening
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    from sqlalchemy.pool import Pool

    def statement(*_a: Any, **_k: Any) -> None:
        _counts["statements"] += 1

    def commit(*_a: Any, **_k: Any) -> None:
        _counts["commits"] += 1

    def rollback(*_a: Any, **_k: Any) -> None:
        _counts["rollbacks"] += 1

    def checkout(*_a: Any, **_k: Any) -> None:
        _counts["checkouts"] += 1  # with pool_pre_ping: one "SELECT 1" round trip each

    # Class-level listeners reach engines created before this module was imported.
    event.listen(Engine, "before_cursor_execute", statement)
    event.listen(Engine, "commit", commit)
    event.listen(Engine, "rollback", rollback)
    event.listen(Pool, "checkout", checkout)
    _listening = True


def _write_counts() -> None:
    if not _listening:
        _listen()
    _counts["calls"] += 1
    path = Path(os.environ["BENCH_COUNT_DIR"]) / f"{os.getpid()}.json"
    path.write_text(json.dumps(_counts))
