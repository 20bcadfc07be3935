"""``wakeful.purge``: retention, in short batches, plus the embedded broker's consumed rows."""

from __future__ import annotations

import logging
from typing import Any

from tasks import embedded
from tasks.application import app
from tasks.runtime import get_store
from tasks.application import runtime_settings

log = logging.getLogger("wakeful.retention")


@app.task(name="wakeful.purge")
def purge(older_than: int | None = None) -> dict[str, Any]:
    """Delete what is older than ``WAKEFUL_RETENTION``. A message may ask for a longer period,
    never a shorter one: anyone on the broker could otherwise wipe the history and the
    record of rejected input (`wakeful purge --older-than` is the operator's way)."""
    store, settings = get_store(), runtime_settings()
    if older_than is not None and older_than < settings.retention:
        reason = (f"older_than={older_than} is shorter than WAKEFUL_RETENTION ({settings.retention} s); "
                  "use `wakeful purge --older-than` to purge more")
        store.operator.record_rejection("task:wakeful.purge", reason)
        log.warning("purge refused: %s", reason)
        return {"rejected": reason}
    counts: dict[str, Any] = store.purge(older_than if older_than is not None else settings.retention)
    if settings.embedded_broker:
        counts["broker_messages"] = embedded.prune(settings.broker)
    return counts
