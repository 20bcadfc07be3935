"""The DBOS peer of the agents section (issue 56, item 3): the same waiting agent as a durable
DBOS workflow, as a DBOS user writes "wait on a model": an async workflow whose one step
awaits the model's time (``await asyncio.sleep(L)``) and returns the reply, checkpointed.

- The queue is partitioned by inbox (``partition_concurrency=1``: one run per inbox at a time,
  as wakeful's inbox lease), with ``worker_concurrency`` = the concurrency the wakeful worker
  gets, and DBOS's default polling interval unless ``BENCH_DBOS_POLL`` says otherwise.
- Workflows are enqueued from another process (the bench's, through ``DBOSClient``), each with
  its inbox as the partition key and as its workflow ID.
- One worker process (``python -m bench.dbos_peer worker``): DBOS's own executor, its
  background event loop running the async workflows, on its own database
  (``wakeful_bench_dbos_<pid>``) on the same PostgreSQL server, DBOS's defaults otherwise.

What is measured comes from DBOS's own records (``dbos.workflow_status``,
``dbos.operation_outputs``): a workflow's completion time, the step's start and end (the
model's wait: runs in flight) and the workflow's dequeue to completion (partitions held).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from dbos import DBOS

APP = "bench-dbos"
QUEUE = "bench_agents"
WORKFLOW = "bench_agent"
STEP = "bench_model_call"
SCHEMA = "dbos"
DEFAULT_POLL = 1.0  # DBOS's own default (DBOS.register_queue's polling_interval_sec)


@DBOS.step(name=STEP)
async def model_call(inbox: str, wait: float) -> str:
    """The model's time: a step that awaits, its answer checkpointed."""
    await asyncio.sleep(wait)
    return f"reply to {inbox}"


@DBOS.workflow(name=WORKFLOW)
async def agent(inbox: str, wait: float) -> str:
    return await model_call(inbox, wait)


def system_url(db: str) -> str:
    from bench import env

    return f"postgresql://{env.PG_USER}@{env.PG_HOST}:{env.PG_PORT}/{db}"


def worker_main(concurrency: int, ready: Path) -> None:
    """One DBOS worker process: launch, register the partitioned queue, serve until SIGTERM."""
    DBOS(config={"name": APP, "system_database_url": os.environ["BENCH_DBOS_URL"], "log_level": "INFO"})
    DBOS.launch()
    DBOS.register_queue(QUEUE, partition_concurrency=1, worker_concurrency=concurrency,
                        polling_interval_sec=float(os.environ.get("BENCH_DBOS_POLL", DEFAULT_POLL)),
                        on_conflict="always_update")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    ready.write_text(str(os.getpid()))
    stop.wait()
    DBOS.destroy()


# ---------------------------------------------------------------------------------------
# the bench's side (bench/waiting.py calls these)


class Peer:
    """The DBOS worker process, its database and a client that enqueues from the bench."""

    def __init__(self, rig: Any, concurrency: int, poll: float | None = None) -> None:
        from bench import env

        self.rig, self.concurrency = rig, concurrency
        self.poll = DEFAULT_POLL if poll is None else poll
        self.db = env.create_database(f"wakeful_bench_dbos_{os.getpid()}")
        self.url = system_url(self.db)
        self.proc: subprocess.Popen | None = None
        self.client: Any = None
        self.log = rig.home / "agents-dbos.log"

    def start(self) -> subprocess.Popen:
        from bench.env import ROOT

        ready = self.rig.home / "dbos.ready"
        ready.unlink(missing_ok=True)
        self.rig.logs["dbos"] = self.log
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "bench.dbos_peer", "worker", str(self.concurrency),
                                          str(ready)],
                                         env=self.rig.env("bench-dbos", BENCH_DBOS_URL=self.url,
                                                          BENCH_DBOS_POLL=str(self.poll)),
                                         cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.rig.procs["dbos"] = self.proc
        deadline = time.monotonic() + 120
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the DBOS worker did not start: see {self.log}")
            time.sleep(0.1)
        if self.client is None:  # after launch: the worker has created and migrated the schema
            from dbos import DBOSClient

            self.client = DBOSClient(system_database_url=self.url, application_name=APP)
        return self.proc

    def enqueue(self, inbox: str, wait: float) -> None:
        self.client.enqueue({"workflow_name": WORKFLOW, "queue_name": QUEUE, "workflow_id": inbox,
                             "queue_partition_key": inbox}, inbox, wait)

    def finished(self, conn: Any, prefix: str) -> int:
        return conn.execute(f"SELECT count(*) FROM {SCHEMA}.workflow_status WHERE workflow_uuid LIKE %s "
                            "AND status NOT IN ('ENQUEUED', 'PENDING', 'DELAYED')", (prefix + "%",)).fetchone()[0]

    def records(self, conn: Any, prefix: str) -> dict[str, dict[str, Any]]:
        """{inbox: {"status", "ok", "end": completed, "wait": the step's (start, end),
        "run": (dequeued, completed)}}, in epoch seconds, from DBOS's own tables."""
        steps = {w: (s / 1000, e / 1000) for w, s, e in conn.execute(
            f"SELECT workflow_uuid, started_at_epoch_ms, completed_at_epoch_ms FROM {SCHEMA}.operation_outputs "
            "WHERE workflow_uuid LIKE %s AND function_name = %s", (prefix + "%", STEP)).fetchall()
            if s is not None and e is not None}
        out: dict[str, dict[str, Any]] = {}
        for w, status, done, started in conn.execute(
                f"SELECT workflow_uuid, status, coalesce(completed_at, updated_at), started_at_epoch_ms "
                f"FROM {SCHEMA}.workflow_status WHERE workflow_uuid LIKE %s", (prefix + "%",)).fetchall():
            finished = status not in ("ENQUEUED", "PENDING", "DELAYED")
            end = done / 1000 if finished and done is not None else None
            out[w] = {"status": status, "ok": status == "SUCCESS", "end": end, "wait": steps.get(w),
                      "run": (started / 1000, end) if started is not None and end is not None else None}
        return out

    def abandon(self, prefix: str) -> None:
        """After a cut form (its worker stopped): its unfinished workflows are deleted, so the
        next form's worker does not recover them."""
        from bench import env

        env.sql(self.db, f"DELETE FROM {SCHEMA}.workflow_status WHERE workflow_uuid LIKE %s "
                "AND status IN ('ENQUEUED', 'PENDING', 'DELAYED')", (prefix + "%",))

    def stop(self) -> None:
        self.rig.stop("dbos")
        self.proc = None

    def close(self) -> None:
        from bench import env

        self.stop()
        if self.client is not None:
            self.client.destroy()
            self.client = None
        env.drop_database(self.db)


def main(argv: list[str]) -> int:
    """``python -m bench.dbos_peer worker CONCURRENCY READY_FILE`` (BENCH_DBOS_URL set)."""
    if len(argv) == 3 and argv[0] == "worker":
        worker_main(int(argv[1]), Path(argv[2]))
        return 0
    print(main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
