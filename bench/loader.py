"""A paced load of probes: ``python -m bench.loader wakeful|peer RATE SECONDS``.

Sends RATE messages per second for SECONDS, each carrying the wall-clock time it was sent
(``wakeful.ingest`` with ``{"sent": t}`` to one of 1,000 inboxes, or the peer's
``bench.probe``), and prints how many it sent."""

from __future__ import annotations

import sys
import time


def main() -> None:
    kind, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    start = time.time()
    if kind == "wakeful":
        import tasks

        app = tasks.app

        def send(i: int) -> None:
            app.send_task("wakeful.ingest", kwargs={"inbox": f"load-{i % 1000}", "source": "load",
                                                    "source_id": f"{start}-{i}", "payload": {"sent": time.time()}})
    else:
        from bench import peer

        def send(i: int) -> None:
            peer.app.send_task("bench.probe", args=[time.time()], queue=peer.QUEUE)

    t0 = time.monotonic()
    i = 0
    while True:
        due = t0 + i / rate
        if due - t0 >= seconds:
            break
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        send(i)
        i += 1
    print(i)


if __name__ == "__main__":
    main()
