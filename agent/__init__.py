"""The agent plug-in interface.

An agent is a callable ``agent(run: Run) -> Outcome | None``. It reads ``run.events`` (the
batch claimed for this run, oldest first) and ``run.memory``, and returns what should happen:
messages, approval requests, timers and memory writes. It does no side effects of its own
that matter twice: the Outcome is applied in one fenced transaction, all of it or none.

An exception fails the run: its events go back to pending after a backoff, and to dead at the
attempt cap. :class:`TryLater` (agent/outage.py) says instead that something the agent needs
is down (its model API, a tool's upstream): the attempt is given back and the events wait
the outage out, up to ``WAKEFUL_OUTAGE_HORIZON``. The runtime renews the lease in the background while the agent runs (for up to
the task's time limit), so a slow model call does not lose the inbox. A long step may still
call ``run.heartbeat()``: it renews at once and raises :class:`LeaseLost` once another worker
has taken the inbox over (this process stalled), so the run stops early instead of doing work
whose finish would be refused anyway.

Daily budgets (store/spend.py, docs/agent.md "Budgets"): an agent that calls a model asks
``run.check_budget(budget)`` before each call (``BudgetReached``: the call must not be made)
and tells ``run.count_spend(budget, usage)`` right after it; the runtime wires both to the
store, so a custom loop gets the same ceilings as the built-in agent.

Choose the agent with ``WAKEFUL_AGENT=module:callable``, or ``WAKEFUL_AGENT=claude`` for the
built-in Claude agent (agent/claude.py, configured by ``WAKEFUL_AGENT_CONFIG``).
"""

from __future__ import annotations

import logging
import os
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from store import Event, Outcome
from store.spend import Budget, Usage, Verdict

from agent.outage import TryLater

__all__ = ["Agent", "BudgetReached", "LeaseLost", "Run", "TryLater", "import_callable", "load_agent", "summary_of"]


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
        agent's wakes count and list (agent/wakes.py). This run's own timers are not among
        them until its finish commits."""
        return list(self._timers())


Agent = Callable[[Run], Outcome | None]


# Built-in agents chosen by a bare name (``WAKEFUL_AGENT=claude``).
BUILTIN = {"claude": "agent.claude:agent", "demo": "agent.demo:agent"}


def load_agent(spec: str) -> Agent:
    """Import ``module:callable`` (or a built-in's name); a clear error when it is not there.
    The claude agent's config is read and checked here, so a bad one stops a worker's start."""
    spec = BUILTIN.get(spec, spec)
    importable_from(os.getcwd())
    if spec == BUILTIN["claude"]:
        from agent.claude import configured

        configured()
    return import_callable(spec)


def summary_of(agent: Agent, outcome: Outcome) -> dict[str, Any]:
    """What an agent says about one run for the run task's summary (Flower): its
    ``summary(outcome)`` hook when it offers one (the claude agent: model calls, tokens, tool
    decisions), {} otherwise. A hook that fails costs the summary, never the run."""
    hook = getattr(agent, "summary", None)
    if not callable(hook):
        return {}
    try:
        said = hook(outcome)
    except Exception as exc:  # the run is committed already: a summary is not worth failing it
        logging.getLogger("wakeful.agent").warning("the agent's summary hook failed: %s: %s",
                                                   type(exc).__name__, exc)
        return {}
    return said if isinstance(said, dict) else {}


def importable_from(*directories: str | os.PathLike[str]) -> None:
    """Let ``module:callable`` name a module in these directories (the agent config's own,
    the working directory, as Celery's ``-A`` finds an app there) with no ``PYTHONPATH``.
    Appended to ``sys.path``: a local file never shadows an installed package."""
    for directory in directories:
        entry = os.path.abspath(directory)
        if entry not in sys.path:
            sys.path.append(entry)


def import_callable(spec: str) -> Callable[..., Any]:
    """``module:callable`` (a dotted attribute path after the colon), imported by the standard
    library's ``pkgutil.resolve_name``."""
    module_name, colon, attr = spec.partition(":")
    if not module_name or not colon or not attr:
        raise ValueError(f"{spec!r} must be module:callable")
    target = pkgutil.resolve_name(spec)
    if not callable(target):
        raise TypeError(f"{spec!r} is not callable")
    return target
