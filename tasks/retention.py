"""``wakeful.purge``: retention, in short batches, plus the embedded broker's consumed rows."""

from __future__ import annotations

from typing import Any

from tasks import embedded
from tasks.application import app
from tasks.runtime import get_store
from tasks.settings import settings


@app.task(name="wakeful.purge")
def purge(older_than: int | None = None) -> dict[str, Any]:
    counts: dict[str, Any] = get_store().purge(older_than if older_than is not None
                                               else settings.retention)
    if settings.embedded_broker:
        counts["broker_messages"] = embedded.prune(settings.broker)
    return counts
