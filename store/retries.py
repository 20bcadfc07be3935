"""A failed run: its events wait a backoff and are tried again, or are parked dead at the cap.

Exponential and capped, decided per row by its attempts (a CASE, so one UPDATE serves the
whole batch). The claim then takes a retried event alone (``claims``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, literal

from .settings import StoreSettings
from .tables import events


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
    }
