"""Agents written by hand, without the tool kit, for tests/agent/test_toolkit_processes.py:
their Outcomes carry effects the way any user's agent may."""

from __future__ import annotations

from wakeful.agent import Run
from store import Effect, Outcome


def unrunnable(run: Run) -> Outcome:
    """Proposes a write of a tool no config names: the runtime must refuse the whole finish."""
    return Outcome(messages=["launching"], memory={"tried": True},
                   effects=[Effect(f"launch-{e.id}", "launch", {"target": "moon"}) for e in run.events])


def hand_written(run: Run) -> Outcome:
    """Each chat event's text is an order number to refund (an allowed write); a tool result
    is reported back."""
    said = [f"result: {e.payload['content']}" for e in run.events if e.source == "tool" and e.payload]
    effects = [Effect(f"hand-{e.id}", "refund", {"order": int(e.payload["text"])})
               for e in run.events if e.source == "chat" and e.payload]
    return Outcome(messages=said, effects=effects)
