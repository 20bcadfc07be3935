"""``wakeful.scan_timers``: due timers become inbox events, and their inboxes are rung.

Beat ticks this at a fixed interval; the store decides what is due (cron, time zones,
coalescing) and advances each timer in the same transaction as its event, so two beats, or
a tick run twice, never fire one occurrence twice.
"""

from __future__ import annotations

from typing import Any

from tasks.application import app
from tasks.doorbell import ring_many
from tasks.runtime import get_store


@app.task(name="wakeful.scan_timers")
def scan_timers() -> dict[str, Any]:
    store = get_store()
    fired = store.run_scheduler()
    rung = ring_many(f.inbox for f in fired if f.stored)
    return {"fired": len(fired), "inboxes_rung": rung}
