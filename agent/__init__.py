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

Choose the agent with ``WAKEFUL_AGENT=module:callable``, or ``WAKEFUL_AGENT=claude`` for the
built-in Claude agent (agent/claude.py, configured by ``WAKEFUL_AGENT_CONFIG``).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from store import Event, Outcome

from agent.outage import TryLater

__all__ = ["Agent", "LeaseLost", "Run", "TryLater", "import_callable", "load_agent"]


class LeaseLost(Exception):
    """The lease was taken over: this run's finish would be refused, so stop now."""


@dataclass
class Run:
    inbox: str
    events: list[Event]
    generation: int
    memory: dict[str, Any]
    _heartbeat: Callable[[], bool] = field(repr=False, default=lambda: True)
    _mint_grant: Callable[[list[str], int], str | None] = field(repr=False, default=lambda routes, ttl: None)

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


def importable_from(*directories: str | os.PathLike[str]) -> None:
    """Let ``module:callable`` name a module in these directories (the agent config's own,
    the working directory, as Celery's ``-A`` finds an app there) with no ``PYTHONPATH``.
    Appended to ``sys.path``: a local file never shadows an installed package."""
    for directory in directories:
        entry = os.path.abspath(directory)
        if entry not in sys.path:
            sys.path.append(entry)


def import_callable(spec: str) -> Callable[..., Any]:
    """``module:callable`` (a dotted attribute path after the colon), imported."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"{spec!r} must be module:callable")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{spec!r} is not callable")
    return target
