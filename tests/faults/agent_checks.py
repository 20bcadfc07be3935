"""The checker's counts for the claude agent's tool calls (scenario 12 and the soak):
executions per tool use id, from the tools' own log and the effects table."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from sqlalchemy import select

from store import Store
from store.tables import effects, events

from checker import read_jsonl  # type: ignore[import-not-found]

AGENT_COUNTS = (
    "tool_call_uncommitted",        # a tool executed under a tool use id no finish committed
    "tool_call_two_keys",           # one tool use id executed under two idempotency keys
    "tool_at_most_once_twice",      # an at-most-once tool use executed more than once
    "tool_done_never_called",       # an effect recorded done without an execution
    "tool_effect_unsettled",        # an effect still ready or executing once everything drained
    "tool_result_not_delivered",    # a finished effect whose result never reached the inbox
)


def tool_counts(store: Store, tool_log: Path | str) -> dict[str, int]:
    calls = read_jsonl(tool_log)
    with store.engine.connect() as conn:
        rows = {(r.inbox, r.tool_use_id): r for r in conn.execute(
            select(effects.c.inbox, effects.c.tool_use_id, effects.c.status, effects.c.delivery))}
        results = {(r.inbox, r.source_id) for r in conn.execute(
            select(events.c.inbox, events.c.source_id).where(events.c.source == "tool"))}
    keys: dict[tuple[str, str], set[str]] = defaultdict(set)
    tries: dict[tuple[str, str], int] = defaultdict(int)
    for c in calls:
        keys[(c["inbox"], c["id"])].add(c["key"])
        tries[(c["inbox"], c["id"])] += 1
    finished = ("done", "refused", "expired", "interrupted")
    return {
        "tool_call_uncommitted": sum(1 for k in tries if k not in rows),
        "tool_call_two_keys": sum(1 for k in keys.values() if len(k) > 1),
        "tool_at_most_once_twice": sum(1 for k, n in tries.items()
                                       if k in rows and rows[k].delivery == "at-most-once" and n > 1),
        "tool_done_never_called": sum(1 for k, r in rows.items() if r.status == "done" and not tries.get(k)),
        "tool_effect_unsettled": sum(1 for r in rows.values() if r.status in ("ready", "executing")),
        "tool_result_not_delivered": sum(1 for k, r in rows.items() if r.status in finished and k not in results),
    }


def executions(tool_log: Path | str) -> dict[str, Any]:
    calls = read_jsonl(tool_log)
    return {"tool_executions": len(calls), "tool_uses": len({(c["inbox"], c["id"]) for c in calls})}
