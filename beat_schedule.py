"""Which task beat sends how often: data only.

Beat only ticks; it never decides anything. Timers, cron and time zones live in the store
(``wakeful.scan_timers`` asks it what is due), so a beat that was down for days, or two beats
at once, cost nothing: a missed tick is made up by the next one and a doubled tick finds
nothing left to do. Each tick expires after one interval, so a backlog of stale ticks is
dropped instead of run. Beat keeps no state (the in-memory scheduler): after a restart each
entry first runs one interval later.
"""

from __future__ import annotations

from typing import Any

from celery.schedules import crontab


def _every(task: str, seconds: float) -> dict[str, Any]:
    """A tick every ``seconds``; one not yet run when the next is due is dropped, not stacked."""
    return {"task": task, "schedule": seconds, "options": {"expires": seconds}}


def beat_schedule(settings: Any) -> dict[str, dict[str, Any]]:
    return {
        "scan-timers": _every("wakeful.scan_timers", settings.scan_interval),
        "sweep": _every("wakeful.sweep", settings.sweep_interval),
        "dispatch-outbox": _every("wakeful.dispatch_outbox", settings.dispatch_interval),
        # the agent kit's tool calls whose ring was lost or whose executor died
        "execute-effects": _every("wakeful.execute_effects", settings.sweep_interval),
        "purge": _every("wakeful.purge", settings.purge_interval),
        "daily-summary": {
            "task": "wakeful.daily_summary",
            "schedule": crontab(minute=0, hour=settings.summary_hour),
            "options": {"queue": "wakeful.control", "expires": 3600},
        },
    }
