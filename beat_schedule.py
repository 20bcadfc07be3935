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


def beat_schedule(settings: Any) -> dict[str, dict[str, Any]]:
    return {
        "scan-timers": {
            "task": "wakeful.scan_timers",
            "schedule": settings.scan_interval,
            "options": {"expires": settings.scan_interval},
        },
        "sweep": {
            "task": "wakeful.sweep",
            "schedule": settings.sweep_interval,
            "options": {"expires": settings.sweep_interval},
        },
        "dispatch-outbox": {
            "task": "wakeful.dispatch_outbox",
            "schedule": settings.dispatch_interval,
            "options": {"expires": settings.dispatch_interval},
        },
        "execute-effects": {  # the agent kit's tool calls whose ring was lost or whose executor died
            "task": "wakeful.execute_effects",
            "schedule": settings.sweep_interval,
            "options": {"expires": settings.sweep_interval},
        },
        "purge": {
            "task": "wakeful.purge",
            "schedule": settings.purge_interval,
            "options": {"expires": settings.purge_interval},
        },
        "daily-summary": {
            "task": "wakeful.daily_summary",
            "schedule": crontab(minute=0, hour=settings.summary_hour),
            "options": {"queue": "wakeful.control", "expires": 3600},
        },
    }
