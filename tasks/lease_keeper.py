"""The runtime holds the lease while the agent works, whatever the agent does.

A model call takes minutes; ``WAKEFUL_LEASE_TTL`` stays short so a crashed worker's inbox is
taken over fast. Between the two, one thread per worker process renews the lease of every run
in progress there every third of its TTL. A run's renewals stop:

- when the run ends (the finish that follows extends or releases the lease itself);
- when the task's soft time limit passes: a run stuck past it is not kept alive, its lease
  lapses and the inbox is taken over;
- when a renewal is refused: the lease was lost (a takeover after this process stalled).
  ``Run.heartbeat()`` then raises ``LeaseLost``, and the finish is refused anyway.

Renewal is judged by the database alone (``Store.renew`` compares the lease to the
database's clock), so a paused process (SIGSTOP, a VM pause) renews nothing and loses its
inbox as before. A renewal that fails for another reason (the database restarting) is
logged and tried again at the next tick; the lease has two more ticks of slack.

One thread for the process, not one per run: starting and joining a thread around every
wake cost ~1 ms of a ~3 ms wake (measured with ``python -m bench.wakepath``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger("wakeful.runs")


@dataclass
class Held:
    """One run's lease, as the keeper holds it."""

    renew: Callable[[], bool]
    every: float
    deadline: float  # time.monotonic() past which nothing is renewed
    name: str
    due: float = 0.0
    lost: threading.Event = field(default_factory=threading.Event)

    def heartbeat(self) -> bool:
        """For ``Run.heartbeat()``: renew now; False once the lease is lost."""
        if not self.lost.is_set() and not self._renew_now():
            self.lost.set()
        return not self.lost.is_set()

    def _renew_now(self) -> bool:
        self.due = time.monotonic() + self.every
        return self.renew()


class LeaseKeeper:
    def __init__(self) -> None:
        self._held: dict[int, Held] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pid: int | None = None  # the process whose thread runs (a fork has none)
        # When the thread wakes up next on its own (time.monotonic()), and how long it sleeps
        # with nothing held. A run whose first renewal is due after that wake-up needs no
        # notify: back-to-back wakes would otherwise wake the thread once each, for nothing.
        self._next_wake = 0.0
        self._idle_wait = 1.0

    @contextmanager
    def holding(self, renew: Callable[[], bool], ttl: float, deadline: float, name: str) -> Iterator[Held]:
        every = max(0.05, ttl / 3)
        held = Held(renew, every, deadline, name, due=time.monotonic() + every)
        with self._lock:
            self._held[id(held)] = held
            self._idle_wait = every
            if self._start_if_needed() or held.due < self._next_wake:
                self._wake.notify()
        try:
            yield held
        finally:
            with self._lock:
                self._held.pop(id(held), None)

    def _start_if_needed(self) -> bool:
        if self._pid == os.getpid():
            return False
        self._pid = os.getpid()
        self._next_wake = time.monotonic()  # until the new thread sets its own
        threading.Thread(target=self._keep, name="lease-keeper", daemon=True).start()
        return True

    def _keep(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                due = [h for h in self._held.values() if h.due <= now]
                if not due:
                    self._next_wake = min((h.due for h in self._held.values()), default=now + self._idle_wait)
                    self._wake.wait(self._next_wake - now)
                    continue
            for held in due:  # outside the lock: a renewal is a database round trip
                self._tick(held)

    def _tick(self, held: Held) -> None:
        if time.monotonic() >= held.deadline:
            log.warning("%s: the run passed the task's time limit; no more renewals", held.name)
            self._drop(held)
            return
        try:
            if not held._renew_now():
                held.lost.set()
                self._drop(held)
        except Exception as exc:  # noqa: BLE001 - a renewal must never kill the keeper
            log.warning("%s: renewal failed (%s); trying again", held.name, exc)

    def _drop(self, held: Held) -> None:
        with self._lock:
            self._held.pop(id(held), None)


keeper = LeaseKeeper()
