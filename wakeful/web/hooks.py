"""Which secrets verify a delivery to an inbox: its own (``wakeful hooks set``), else the
global ones from the environment.

The web process keeps a snapshot of every inbox's own secrets, read from the store at most
every ``REFRESH_SECONDS``: a change made with ``wakeful hooks`` is in force within that
long, without a restart, and a flood of deliveries to made-up inboxes costs no database
read each (one read per refresh, whatever the traffic). An inbox with any secret of its
own never falls back to the global ones; a row the key cannot open verifies nothing (the
inbox fails closed, and the log says so).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread

log = logging.getLogger("wakeful.web")

REFRESH_SECONDS = 5.0

Snapshot = dict[str, dict[str, tuple[str, ...]]]


def loader(store: Callable[[], Any], secrets_key: str) -> Callable[[], Snapshot]:
    """Read every inbox's secrets. Without a key the rows are still read, as ``()``, so an
    inbox with secrets of its own fails closed instead of falling back to the global ones."""
    from store.hook_secrets import cipher

    f = cipher(secrets_key) if secrets_key else None

    def load() -> Snapshot:
        if f is not None:
            return store().hook_secrets.unsealed(cipher=f)
        snapshot: Snapshot = {}
        for row in store().hook_secrets.rows():
            snapshot.setdefault(row.inbox, {})[row.kind] = ()
        return snapshot

    return load


class HookSecrets:
    def __init__(self, load: Callable[[], Snapshot], clock: Callable[[], float]) -> None:
        self._load = load
        self._clock = clock
        self._snapshot: Snapshot | None = None
        self._at = -math.inf
        self._lock = anyio.Lock()
        self._unusable: list[str] = []

    async def own(self, inbox: str) -> dict[str, tuple[str, ...]] | None:
        """The inbox's own secrets by kind, or None when it has none (use the global ones)."""
        if self._clock() - self._at >= REFRESH_SECONDS:
            async with self._lock:
                if self._clock() - self._at >= REFRESH_SECONDS:
                    await self._refresh()
        assert self._snapshot is not None
        return self._snapshot.get(inbox)

    async def _refresh(self) -> None:
        try:
            snapshot = await anyio.to_thread.run_sync(self._load)
        except Exception:
            if self._snapshot is None:
                raise  # nothing to go on: the request fails (503 for a store outage)
            log.error("could not re-read the per-inbox webhook secrets; using the last ones read",
                      exc_info=True)
            self._at = self._clock()
            return
        unusable = sorted(f"{inbox} ({kind})" for inbox, kinds in snapshot.items()
                          for kind, values in kinds.items() if not values)
        if unusable and unusable != self._unusable:
            log.error("per-inbox webhook secrets that WAKEFUL_SECRETS_KEY cannot open (those "
                      "inboxes refuse deliveries): %r", unusable[:20])
        self._snapshot, self._at, self._unusable = snapshot, self._clock(), unusable
