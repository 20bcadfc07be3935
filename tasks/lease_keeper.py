"""The runtime holds the lease while the agent works, whatever the agent does.

A model call takes minutes; ``WAKEFUL_LEASE_TTL`` stays short so a crashed worker's inbox is
taken over fast. Between the two, one thread per worker process renews the lease of every run
in progress there every third of its TTL, all the runs due at a tick in one statement
(``store.runs.renew_many``): a dense worker with a thousand runs in flight costs the database a
few statements a second, not a thousand. A run's renewals stop:

- when the run ends (the finish that follows extends or releases the lease itself);
- when the task's time limit (``WAKEFUL_RUN_TIME_LIMIT``) passes: the run's ``on_deadline``
  is called (the run task ends the run there: its finish fails the events and releases the
  lease, whatever pool carries it; Celery's threads pool has no time limits of its own);
- when a renewal is refused: the lease was lost (a takeover after this process stalled).
  ``Run.heartbeat()`` then raises ``LeaseLost``, and the finish is refused anyway.

Renewal is judged by the database alone (``Store.renew`` compares the lease to the
database's clock), so a paused process (SIGSTOP, a VM pause) renews nothing and loses its
inbox as before. A renewal that fails for another reason (the database restarting) is
logged and tried again at the next tick; the lease has two more ticks of slack.

One thread for the process, not one per run: starting and joining a thread around every
wake cost a third of a no-op wake (docs/performance.md, "Measurements behind the design").
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger("wakeful.runs")


class Lease(Protocol):
    """What the keeper renews: a run's (inbox, holder, generation) in a store."""

    store: Any
    inbox: str
    holder: str
    generation: int

    def renew(self) -> bool: ...


@dataclass
class Held:
    """One run's lease, as the keeper holds it."""

    lease: Lease
    every: float
    deadline: float  # time.monotonic() past which nothing is renewed
    name: str
    on_deadline: Callable[[], None] | None = None
    due: float = 0.0
    lost: threading.Event = field(default_factory=threading.Event)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.lease.inbox, self.lease.holder, self.lease.generation)

    def heartbeat(self) -> bool:
        """For ``Run.heartbeat()``: renew now if the renewal is due within half a period (the
        keeper's own window). Sooner, the lease was renewed or taken a moment ago (the claude
        agent's first model call comes right after the run's start) and the answer is that
        one's: a lease lost since is found at the keeper's next tick, and every write the run
        makes is fenced by its generation anyway. False once the lease is lost."""
        if not self.lost.is_set() and time.monotonic() >= self.due - self.every / 2 and not self._renew_now():
            self.lost.set()
        return not self.lost.is_set()

    def _renew_now(self) -> bool:
        self.due = time.monotonic() + self.every
        return self.lease.renew()


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
    def holding(self, lease: Lease, ttl: float, deadline: float, name: str,
                on_deadline: Callable[[], None] | None = None) -> Iterator[Held]:
        every = max(0.05, ttl / 3)
        held = Held(lease, every, deadline, name, on_deadline, due=time.monotonic() + every)
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
                # It wakes when the first run is due; any due within half a period after is
                # renewed with it, early: the runs of a busy process fall into step and share
                # one statement per tick.
                due = [h for h in self._held.values() if min(h.due - h.every / 2, h.deadline) <= now]
                if not due:
                    self._next_wake = min((min(h.due, h.deadline) for h in self._held.values()),
                                          default=now + self._idle_wait)
                    self._wake.wait(self._next_wake - now)
                    continue
            self._tick(due)  # outside the lock: a renewal is a database round trip

    def _tick(self, due: list[Held]) -> None:
        now = time.monotonic()
        for held in [h for h in due if now >= h.deadline]:
            log.warning("%s: the run passed the task's time limit; ending it", held.name)
            self._drop(held)
            held.lost.set()
            if held.on_deadline is not None:
                try:
                    held.on_deadline()
                except Exception as exc:  # noqa: BLE001 - the keeper must outlive any run
                    log.warning("%s: ending the run past its time limit failed: %s", held.name, exc)
        by_store: dict[int, list[Held]] = {}
        for held in due:
            if now < held.deadline:
                held.due = now + held.every
                by_store.setdefault(id(held.lease.store), []).append(held)
        for group in by_store.values():
            try:
                renewed = group[0].lease.store.runs.renew_many([h.key for h in group])
            except Exception as exc:  # noqa: BLE001 - a renewal must never kill the keeper
                log.warning("renewing %d leases failed (%s); trying again", len(group), exc)
                continue
            for held in group:
                if held.key not in renewed:
                    held.lost.set()
                    self._drop(held)

    def _drop(self, held: Held) -> None:
        with self._lock:
            self._held.pop(id(held), None)


keeper = LeaseKeeper()
