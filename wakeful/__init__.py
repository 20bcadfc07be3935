"""wakeful: the runtime around an always-on AI agent (docs/design.md).

What an agent author imports::

    from wakeful import Run, Outcome, Message, TryLater

    def agent(run: Run) -> Outcome:
        ...

The names are resolved on first use (PEP 562 ``__getattr__``), not when this package is
imported: ``store`` imports ``wakeful.settings``, which runs this file first, and the agent
kit imports ``store`` — an eager import here would be a circular one (docs/design.md,
"Layout").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module that defines it (each name has one home; this face only points at it).
_PUBLIC = {
    # what a run is given, and what it may raise
    "Run": "wakeful.agent.run",
    "Agent": "wakeful.agent.run",
    "LeaseLost": "wakeful.agent.run",
    "BudgetReached": "wakeful.agent.run",
    "TryLater": "wakeful.agent.outage",
    # what a run returns
    "Outcome": "store.records",
    "Message": "store.records",
    "MessageKind": "store.records",
    "ApprovalRequest": "store.records",
    "Timer": "store.records",
    "Effect": "store.records",
    "Event": "store.records",
    # tools, for a loop of the author's own (docs/agent.md, "Your own loop")
    "Tool": "wakeful.agent.tool",
    "ToolCall": "wakeful.agent.tool",
    "Toolkit": "wakeful.agent.kit",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'wakeful' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


if TYPE_CHECKING:  # for type checkers and editors; never run
    from store.records import ApprovalRequest, Effect, Event, Message, MessageKind, Outcome, Timer
    from wakeful.agent.kit import Toolkit
    from wakeful.agent.outage import TryLater
    from wakeful.agent.run import Agent, BudgetReached, LeaseLost, Run
    from wakeful.agent.tool import Tool, ToolCall
