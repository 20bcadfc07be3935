"""What an agent is given, one run at a time: :class:`Run` (the inbox, the claimed events, the
memory, and the runtime's calls a run may make), and the two ways a run learns it must stop,
:class:`LeaseLost` and :class:`BudgetReached`. The plug-in interface as a whole is described
in wakeful/agent/__init__.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from store import Event, Outcome
from store.spend import Budget, Usage, Verdict

__all__ = ["Agent", "BudgetReached", "LeaseLost", "Run"]


class LeaseLost(Exception):
    """The lease was taken over: this run's finish would be refused, so stop now."""


class BudgetReached(Exception):
    """Today's budget of this inbox or agent is spent: the model call was not made. The run
    ends without it (its finish commits what it has); ``verdict.resumes_at`` is when the
    next day's budget starts."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reached or "the daily budget is reached")
        self.verdict = verdict

    def __reduce__(self) -> Any:  # crosses a run apart's pipe (tasks/isolation.py)
        return (BudgetReached, (self.verdict,))


@dataclass
class Run:
    inbox: str
    events: list[Event]
    generation: int
    memory: dict[str, Any]
    _heartbeat: Callable[[], bool] = field(repr=False, default=lambda: True)
    _mint_grant: Callable[[list[str], int], str | None] = field(repr=False, default=lambda routes, ttl: None)
    # Budgets (store/spend.py), filled by the runtime; without one nothing is checked or counted.
    _check_budget: Callable[[Budget], Verdict | None] = field(repr=False, default=lambda budget: None)
    _count_spend: Callable[[Budget, Usage], None] = field(repr=False, default=lambda budget, usage: None)
    _timers: Callable[[], list[Any]] = field(repr=False, default=lambda: [])

    def heartbeat(self) -> None:
        """Renew the lease. Raises LeaseLost when this worker no longer holds the inbox."""
        if not self._heartbeat():
            raise LeaseLost(f"lease on inbox {self.inbox!r} (generation {self.generation}) lost")

    def grant(self, routes: list[str], ttl: int) -> str:
        """A grant for the egress proxy's ``routes`` (store/grants.py), bound to this run's
        lease: dead once another worker takes the inbox over. Raises LeaseLost if the lease
        is already gone. The agent never holds a route's key, only this."""
        token = self._mint_grant(list(routes), ttl)
        if token is None:
            raise LeaseLost(f"lease on inbox {self.inbox!r} (generation {self.generation}) lost")
        return token

    def check_budget(self, budget: Budget) -> None:
        """Call before each model call. Raises BudgetReached when today's spend of this
        inbox or of the agent has reached a ceiling of ``budget`` (the call must not be
        made), LeaseLost when the lease is gone. The first refusal of the day tells the
        inbox's user, once; each refusal is an incident the operator sees."""
        if not budget.limited():
            return  # no ceiling: nothing to ask the store (the call is still counted)
        verdict = self._check_budget(budget)
        if verdict is None or verdict.allowed:
            return
        if not verdict.held:
            raise LeaseLost(f"lease on inbox {self.inbox!r} (generation {self.generation}) lost")
        raise BudgetReached(verdict)

    def count_spend(self, budget: Budget, usage: Usage) -> None:
        """Call right after each model call with the usage it returned: counted at once in
        the store for the inbox and the agent, even if this run is later fenced."""
        self._count_spend(budget, usage)

    def timers(self) -> list[Any]:
        """This inbox's timers as stored now (``store.TimerRow``s), read-only: what the
        agent's wakes count and list (wakeful/agent/wakes.py). This run's own timers are not among
        them until its finish commits."""
        return list(self._timers())


Agent = Callable[[Run], Outcome | None | Awaitable[Outcome | None]]
"""``agent(run)``, or ``async def agent(run)``: the runtime awaits a coroutine on the worker
process's one event loop (tasks/event_loop.py)."""
