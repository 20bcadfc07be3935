"""The runtime holds the lease while the agent works, whatever the agent does.

A model call takes minutes; ``WAKEFUL_LEASE_TTL`` stays short so a crashed worker's inbox is
taken over fast. Between the two, a thread renews the lease every third of its TTL for as
long as one run lasts. It stops:

- when the run ends (the finish that follows extends or releases the lease itself);
- when the task's soft time limit passes: a run stuck past it is not kept alive, its lease
  lapses and the inbox is taken over;
- when a renewal is refused: the lease was lost (a takeover after this process stalled).
  ``Run.heartbeat()`` then raises ``LeaseLost``, and the finish is refused anyway.

Renewal is judged by the database alone (``Store.renew`` compares the lease to the
database's clock), so a paused process (SIGSTOP, a VM pause) renews nothing and loses its
inbox as before. A renewal that fails for another reason (the database restarting) is
logged and tried again at the next tick; the lease has two more ticks of slack.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("wakeful.runs")


class LeaseKeeper:
    def __init__(self, renew: Callable[[], bool], ttl: float, deadline: float, name: str) -> None:
        self._renew = renew
        self._every = max(0.05, ttl / 3)
        self._deadline = deadline  # time.monotonic() past which nothing is renewed
        self._stop = threading.Event()
        self.lost = threading.Event()
        self._thread = threading.Thread(target=self._keep, name=f"lease-keeper:{name}", daemon=True)

    def __enter__(self) -> "LeaseKeeper":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def heartbeat(self) -> bool:
        """For ``Run.heartbeat()``: renew now; False once the lease is lost."""
        if self.lost.is_set():
            return False
        if not self._renew():
            self.lost.set()
        return not self.lost.is_set()

    def _keep(self) -> None:
        while not self._stop.wait(self._every):
            if time.monotonic() >= self._deadline:
                log.warning("%s: the run passed the task's time limit; no more renewals",
                            self._thread.name)
                return
            try:
                if not self._renew():
                    self.lost.set()
                    return
            except Exception as exc:  # noqa: BLE001 - a renewal must never kill the run
                log.warning("%s: renewal failed (%s); trying again", self._thread.name, exc)
