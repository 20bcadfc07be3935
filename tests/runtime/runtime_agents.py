"""Agents the runtime tests plug in through WAKEFUL_AGENT (imported by the worker processes)."""

from __future__ import annotations

from agent import Run


def invalid_outcome(run: Run) -> object:
    """Returns something that is not an Outcome: the store must refuse it whole."""
    return "not an outcome"


def slow(run: Run) -> None:
    """Half a second per run, silent: long enough that a backlog outlasts one worker."""
    import time

    time.sleep(0.5)
