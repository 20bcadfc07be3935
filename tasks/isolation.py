"""Where a run's agent call runs (issue 22: fault isolation where runs share a process).

``call_agent(agent, run)`` is the one place the run task calls the agent. Today it calls it
in the task's own thread.
"""

from __future__ import annotations

from store import Outcome

from agent import Agent, Run


def call_agent(agent: Agent, run: Run) -> Outcome | None:
    return agent(run)
