"""A stand-in worker for the fenced-grant test: takes the inbox's lease (a short TTL), mints
its run's grant, calls through the proxy once, then waits for "go" on stdin (the test stops it
with SIGSTOP meanwhile, past its lease) and calls again, printing what the proxy answered.

    python fenced_worker.py DATABASE_URL PROXY_URL INBOX
"""

from __future__ import annotations

import sys


from wakeful.agent.egress import Egress
from store import Store


def main(database_url: str, proxy: str, inbox: str) -> None:
    store = Store.connect(database_url, lease_ttl=2)
    generation = store.acquire(inbox, "stopped-worker")
    assert generation is not None
    egress = Egress(proxy, store.grants.mint(inbox, "stopped-worker", generation, ["shop"], 600))
    assert egress is not None
    with egress.http("shop") as http:
        print("first", http.get("/orders/before-the-stop").status_code, generation, flush=True)
        sys.stdin.readline()  # "go": sent after SIGCONT, once another worker took the inbox over
        late = http.get("/orders/after-the-takeover")
        print("late", late.status_code, late.headers.get("x-wakeful-refused"), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
