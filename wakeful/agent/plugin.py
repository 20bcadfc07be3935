"""The runtime's side of the plug-in interface (wakeful/agent/__init__.py): :func:`load_agent` makes
``WAKEFUL_AGENT`` the callable a worker runs, and :func:`summary_of` asks an agent's own
``summary`` hook what it says about one run."""

from __future__ import annotations

import logging
import os
from typing import Any

from store import Outcome

from wakeful.agent.loading import BUILTIN, builtin, import_callable, importable_from
from wakeful.agent.run import Agent

__all__ = ["load_agent", "summary_of"]


def load_agent(spec: str) -> Agent:
    """Import ``module:callable`` (or a built-in's name); a clear error when it is not there.
    The claude agent's config is read and checked here, so a bad one stops a worker's start."""
    spec = builtin(spec)
    importable_from(os.getcwd())
    if spec == BUILTIN["claude"]:
        from wakeful.agent.claude import configured

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
