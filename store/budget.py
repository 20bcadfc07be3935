"""How many refusals a process may write to the store a second.

A flood of garbage must not become a flood of writes to the database that decides what is
true: the web edge's rejections, the workers' refused messages and the proxy's refused
requests are each written at most ``rate`` a second per process (a burst of twice as many);
beyond it a refusal is still answered, logged and counted by its caller, not written.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class WriteBudget:
    """A token bucket: ``rate`` writes a second, ``2 * rate`` at once. Used from one thread
    (an event loop, or a worker's consumer): no lock."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.clock = rate, clock
        self._tokens = 2.0 * rate
        self._at = clock()

    def take(self) -> bool:
        """True, and one write spent, when a write is within the budget."""
        now = self.clock()
        self._tokens = min(2.0 * self.rate, self._tokens + max(0.0, now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True
