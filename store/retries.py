"""A failed run: its events wait a backoff and are tried again, or are parked dead at the cap.

Two kinds of failure, told apart by the agent (``finish(..., error=, retry_after=)``):

- **an error** (the agent raised, the run timed out, its outcome was refused): the attempt the
  claim charged stands; the events wait an exponential, capped backoff decided per row by its
  attempts (a CASE, so one UPDATE serves the whole batch) and are parked dead at the cap. The
  claim then takes a retried event alone (``claims``).
- **"try later"** (the model's or a tool's upstream is down, rate limited, overloaded): nothing
  was wrong with the events, so the attempt is given back (``waits`` + 1 instead) and they
  wait as long as the outage has lasted so far (``outage_delay``), or the upstream's
  Retry-After if longer; past ``outage_horizon`` they are parked dead with the reason
  ``outage``. An error ends the outage (``outage_since`` back to NULL).
"""

from __future__ import annotations

import random
from typing import Any

from sqlalchemy import ColumnElement, Integer, case, cast, func, literal

from wakeful.settings import StoreSettings
from .tables import events

OUTAGE_REASON = "outage"  # the error of an event parked dead at the horizon starts with it


def backoff(s: StoreSettings, attempts: int) -> int:
    """Seconds before a failed event may be claimed again: exponential, capped."""
    return min(s.backoff_max, s.backoff_base * 2 ** max(0, attempts - 1))


def failed_values(s: StoreSettings, error: str, now: int) -> dict[str, Any]:
    """Column values for a failed run's events: dead at the cap, else pending after a backoff
    that depends on each row's attempts."""
    at_cap = events.c.attempts >= s.max_attempts
    steps, n = [], 1
    while n < s.max_attempts and backoff(s, n) < s.backoff_max:
        steps.append((events.c.attempts == n, backoff(s, n)))
        n += 1
    delay = case(*steps, else_=s.backoff_max) if steps else literal(s.backoff_max)
    return {
        "status": case((at_cap, "dead"), else_="pending"),
        "finished": case((at_cap, now), else_=None),
        "not_before": case((at_cap, events.c.not_before), else_=delay + now),
        "error": error,
        "outage_since": None,
    }


def outage_delay(s: StoreSettings, since: Any, now: int, retry_after: int,
                 jitter: float | None = None) -> ColumnElement[Any]:
    """Seconds to wait before trying again, as SQL over ``since`` (the row's outage_since
    column, NULL for a first "try later"): as long as the outage has lasted, between
    ``outage_backoff_base`` and ``outage_backoff_max`` (so the waits double), scaled by a
    jitter in [0.5, 1] so inboxes that failed together do not all come back together, and
    never shorter than the upstream's ``retry_after`` (bounded by the horizon)."""
    lasted = now - func.coalesce(since, now)
    grown = case((lasted < s.outage_backoff_base, s.outage_backoff_base),
                 (lasted > s.outage_backoff_max, s.outage_backoff_max), else_=lasted)
    per_mille = int(1000 * (random.uniform(0.5, 1.0) if jitter is None else jitter))
    jittered = cast(grown * per_mille // 1000, Integer)
    floor = min(max(0, retry_after), s.outage_horizon)
    return case((jittered < floor, floor), else_=jittered)


def waiting_values(s: StoreSettings, table: Any, retry_after: int, now: int) -> tuple[dict[str, Any], Any]:
    """For rows of ``table`` (events or effects: both have ``not_before`` and ``outage_since``)
    whose run said "try later": (the column values that make them wait ``outage_delay``, the
    outage starting now if none was on; the horizon test, a SQL expression over the row, true
    once the outage has lasted ``outage_horizon``: then the caller gives up instead)."""
    since = func.coalesce(table.c.outage_since, now)
    past = since + s.outage_horizon <= now
    delay = outage_delay(s, table.c.outage_since, now, retry_after)
    return {"not_before": case((past, table.c.not_before), else_=now + delay), "outage_since": since}, past


def waited_values(s: StoreSettings, error: str, retry_after: int, now: int) -> dict[str, Any]:
    """Column values for a "try later" run's events: the attempt given back, pending after
    ``outage_delay``, or dead with the reason ``outage`` past the horizon."""
    values, past = waiting_values(s, events, retry_after, now)
    return {
        **values,
        "status": case((past, "dead"), else_="pending"),
        "finished": case((past, now), else_=None),
        "attempts": case((events.c.attempts > 0, events.c.attempts - 1), else_=0),
        "waits": events.c.waits + 1,
        "error": case((past, literal(f"{OUTAGE_REASON}: still failing after the outage horizon "
                                     f"({s.outage_horizon} s); last: ") + error), else_=error),
    }
