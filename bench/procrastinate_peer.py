"""The procrastinate peer, in two shapes:

- the drain (bench/drain.py): a no-op task, jobs deferred with a per-key ``lock``, drained by
  worker processes with procrastinate's default settings (``python -m bench.procrastinate_peer``
  runs one worker, concurrency 1: as many worker processes as wakeful has pool processes);
- agents that wait (bench/waiting.py, issue 56 item 3): an async job that awaits L seconds (the
  model's time), deferred from another process (the bench's) with the inbox as its ``lock``
  (one job per inbox at a time, as wakeful's lease), run by one worker process with enough
  concurrency for N (``python -m bench.procrastinate_peer agents CONCURRENCY``), on its own
  database on the same PostgreSQL server. What is measured comes from procrastinate's own
  records (``procrastinate_events``: each job's ``started`` and ``succeeded``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any

from procrastinate import App, PsycopgConnector

QUEUE = "bench"
AGENTS_QUEUE = "bench_agents"
AGENTS_TASK = "bench_agent_wait"

app = App(connector=PsycopgConnector(conninfo=os.environ.get("BENCH_PROCRASTINATE_DSN", "")))


@app.task(name="bench_noop", queue=QUEUE)
def noop(n: int) -> None:
    """Nothing: the job's fetch, lock and completion are all that is measured."""


@app.task(name=AGENTS_TASK, queue=AGENTS_QUEUE)
async def agent_wait(inbox: str, wait: float) -> str:
    """The waiting agent as a procrastinate user writes it: an async job awaiting the model."""
    await asyncio.sleep(wait)
    return f"reply to {inbox}"


def main() -> None:
    with app.open():
        app.run_worker(queues=[QUEUE], concurrency=1, wait=True, delete_jobs="never")


def agents_main(concurrency: int) -> None:
    app.run_worker(queues=[AGENTS_QUEUE], concurrency=concurrency, wait=True, delete_jobs="never")


# ---------------------------------------------------------------------------------------
# the agents section's side (bench/waiting.py calls these)


class AgentsPeer:
    """The worker process, its database, and an app of the bench's own that defers by task
    name (as another service would: it does not import the task)."""

    def __init__(self, rig: Any, concurrency: int) -> None:
        from bench import env

        self.rig, self.concurrency = rig, concurrency
        self.db = env.create_database(f"wakeful_bench_procrastinate_agents_{os.getpid()}")
        self.dsn = env.pg_conninfo(self.db)
        self.sender = App(connector=PsycopgConnector(conninfo=self.dsn + " application_name=bench-sender"))
        self.sender.open()
        self.sender.schema_manager.apply_schema()
        self.proc: subprocess.Popen | None = None
        self.log = rig.home / "agents-procrastinate.log"

    def start(self) -> subprocess.Popen:
        from bench.env import ROOT

        self.rig.logs["procrastinate"] = self.log
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "bench.procrastinate_peer", "agents",
                                          str(self.concurrency)],
                                         env=self.rig.env("bench-procrastinate", BENCH_PROCRASTINATE_DSN=self.dsn),
                                         cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.rig.procs["procrastinate"] = self.proc
        # Ready when the worker has registered itself (procrastinate_workers), after its listener.
        from bench import env

        deadline = time.monotonic() + 60
        while not env.sql(self.db, "SELECT 1 FROM procrastinate_workers LIMIT 1"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the procrastinate worker did not start: see {self.log}")
            time.sleep(0.1)
        return self.proc

    def enqueue(self, inbox: str, wait: float) -> int:
        return self.sender.configure_task(AGENTS_TASK, lock=inbox, queue=AGENTS_QUEUE).defer(inbox=inbox, wait=wait)

    def finished(self, conn: Any, prefix: str) -> int:
        return conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE lock LIKE %s "
                            "AND status NOT IN ('todo', 'doing')", (prefix + "%",)).fetchone()[0]

    def records(self, conn: Any, prefix: str) -> dict[str, dict[str, Any]]:
        """{inbox: {"status", "ok", "wait": (start, end) of the job, "run": the same}}, from
        the jobs' ``started`` and ``succeeded`` events (the job is the wait)."""
        out: dict[str, dict[str, Any]] = {}
        for inbox, status, started, ended in conn.execute(
                "SELECT j.lock, j.status::text, "
                "extract(epoch FROM min(e.at) FILTER (WHERE e.type = 'started'))::float8, "
                "extract(epoch FROM max(e.at) FILTER (WHERE e.type IN ('succeeded', 'failed')))::float8 "
                "FROM procrastinate_jobs j LEFT JOIN procrastinate_events e ON e.job_id = j.id "
                "WHERE j.lock LIKE %s GROUP BY j.id, j.lock, j.status", (prefix + "%",)).fetchall():
            span = (started, ended) if started is not None and ended is not None else None
            out[inbox] = {"status": status, "ok": status == "succeeded", "end": ended, "wait": span, "run": span}
        return out

    def abandon(self, prefix: str) -> None:
        """After a cut form (its worker stopped): its unfinished jobs are deleted."""
        from bench import env

        env.sql(self.db, "DELETE FROM procrastinate_jobs WHERE lock LIKE %s AND status IN ('todo', 'doing')",
                (prefix + "%",))

    def stop(self) -> None:
        self.rig.stop("procrastinate")
        self.proc = None

    def close(self) -> None:
        from bench import env

        self.stop()
        self.sender.close()
        env.drop_database(self.db)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "agents":
        agents_main(int(sys.argv[2]))
    else:
        main()
