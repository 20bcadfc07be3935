"""The procrastinate peer: a no-op task, jobs deferred with a per-key ``lock``, drained by
worker processes with procrastinate's default settings (``python -m bench.procrastinate_peer``
runs one worker, concurrency 1: as many worker processes as wakeful has pool processes)."""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

QUEUE = "bench"

app = App(connector=PsycopgConnector(conninfo=os.environ.get("BENCH_PROCRASTINATE_DSN", "")))


@app.task(name="bench_noop", queue=QUEUE)
def noop(n: int) -> None:
    """Nothing: the job's fetch, lock and completion are all that is measured."""


def main() -> None:
    with app.open():
        app.run_worker(queues=[QUEUE], concurrency=1, wait=True, delete_jobs="never")


if __name__ == "__main__":
    main()
