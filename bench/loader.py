"""A paced background load: ``python -m bench.loader wakeful|peer RATE SECONDS``."""

from __future__ import annotations

import sys
import time


def main() -> None:
    kind, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    if kind == "wakeful":
        import tasks

        app = tasks.app

        def send(i: int) -> None:
            app.send_task("wakeful.ingest", kwargs={"inbox": f"load-{i % 1000}", "source": "load",
                                                    "source_id": f"{start}-{i}", "payload": {}})
    else:
        from bench import peer

        def send(i: int) -> None:
            peer.app.send_task("bench.noop", queue=peer.QUEUE)

    start = time.time()
    t0 = time.monotonic()
    i = 0
    while True:
        due = t0 + i / rate
        now = time.monotonic()
        if due - t0 > seconds:
            return
        if due > now:
            time.sleep(due - now)
        send(i)
        i += 1


if __name__ == "__main__":
    main()
