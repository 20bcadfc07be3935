"""``wakeful.daily_summary``: new dead events, expired approvals, outages still being
waited out and daily budgets reached, told to an operator.

A poison event parks itself dead and the agent just goes quiet; an approval nobody answered
resumes as ``expired``. Neither makes noise on its own, so once a day (beat,
``WAKEFUL_SUMMARY_HOUR`` UTC) this task writes what went wrong since the last summary:

- to the outbox of the operator inbox (``WAKEFUL_OPERATOR_INBOX``), through the store's
  normal fenced write path: the task takes that inbox's lease, reads the watermark (the end
  of the last summary) from the inbox's memory, and finishes an event-less run whose
  ``Outcome`` holds the message and the new watermark. Message and watermark commit
  together, so a summary is written once even with two beats, and the outbox dispatcher
  sends it through the configured channel like any other message (the gap applies);
- or, when no operator inbox is set, to the log (``wakeful.summary`` logger, WARNING), each
  summary covering the 24 hours before it.

Nothing new means no message (only the watermark moves) and an INFO log line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from store import Message, Outcome, Store
from store.effects import defang

from tasks.application import app
from tasks.doorbell import ring, ring_dispatch
from tasks.runtime import get_store, holder_name
from tasks.application import runtime_settings

log = logging.getLogger("wakeful.summary")

DAY = 86400
WATERMARK = "wakeful.daily_summary.until"  # memory key in the operator inbox
HOLDER = "wakeful.daily_summary"
LISTED = 20  # lines per section; the rest is counted (the CLI shows them all)


def render(found: dict[str, list[Any]], since: int, until: int) -> str | None:
    """The summary's text, or None when nothing went wrong in the period."""
    dead, expired = found.get("dead", []), found.get("expired_approvals", [])
    outages, budgets = found.get("outages", []), found.get("budgets", [])
    if not dead and not expired and not outages and not budgets:
        return None
    lines = [f"wakeful: what went wrong from {_when(since)} to {_when(until)} UTC"]
    if dead:
        lines.append(f"{len(dead)} event(s) parked dead (the agent will not see them again "
                     "until requeued):")
        lines += [f"  #{e.id} inbox {e.inbox}: {e.source}/{e.source_id}, {e.attempts} attempt(s): "
                  f"{(e.error or 'no error recorded')[:200]}" for e in dead[:LISTED]]
        lines += _more(len(dead))
    if expired:
        lines.append(f"{len(expired)} approval(s) expired unanswered:")
        lines += [f"  inbox {e.inbox}: {e.source_id} ({(e.payload or {}).get('action', '?')})"
                  for e in expired[:LISTED]]
        lines += _more(len(expired))
    if outages:
        lines.append(f"{len(outages)} inbox(es) waiting for an upstream to come back (their runs say "
                     "try later; parked dead with the reason outage past WAKEFUL_OUTAGE_HORIZON):")
        lines += [f"  inbox {o.inbox}: {o.events} event(s) since {_when(o.since)} UTC" for o in outages[:LISTED]]
        lines += _more(len(outages))
    if budgets:
        lines.append(f"{len(budgets)} daily budget(s) reached: model calls not made until the next UTC day "
                     "(the inbox's user was told):")
        lines += [f"  {_budget_line(b)}" for b in budgets[:LISTED]]
        lines += _more(len(budgets))
    lines.append("See `wakeful dead`, `wakeful requeue EVENT_ID` / `--inbox I`, "
                 "`wakeful incidents --since N`.")
    # It quotes text from outside (an expired approval's action is the model's tool input; a
    # dead event's error and source id can carry a sender's text): no link marker of its own.
    return defang("\n".join(lines))


def _budget_line(row: Any) -> str:
    ceilings = [f"{row.token_ceiling} tokens" if row.token_ceiling is not None else "",
                f"{row.cost_ceiling:g} money" if row.cost_ceiling is not None else ""]
    limit = " / ".join(c for c in ceilings if c) or "its ceiling"
    money = f", {row.cost:.4f} money" if row.cost else ""
    return (f"{row.scope} {row.name} on {_when(row.day)[:10]}: {row.tokens} tokens{money} "
            f"(ceiling {limit}); {row.refused} call(s) not made, the first at {_when(row.first_refused)} UTC")


def incidents(store: Store, since: int) -> dict[str, list[Any]]:
    """What the summary tells: the store's incidents and the budgets reached (store/spend.py)."""
    return {**store.operator.incidents(since), "budgets": store.spend.incidents(since)}


def _more(count: int) -> list[str]:
    return [f"  ... and {count - LISTED} more"] if count > LISTED else []


def _when(at: int) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M")


def write_summary(store: Store, operator_inbox: str | None, holder: str = HOLDER, *,
                  ring_inbox: Callable[[str], Any] | None = None,
                  now: int | None = None) -> dict[str, Any]:
    """Write the summary since the last one. Returns what was done, for the task's result.

    ``{"skipped": ...}`` when another worker holds the operator inbox's lease (nothing was
    written; the caller retries). ``ring_inbox`` is called with the operator inbox when events
    are waiting in it after the summary let go of its lease.
    """
    # The database's clock, like the finish times it is compared with: on a worker's clock
    # running ahead, the watermark would pass incidents that had not happened yet, and the
    # next summary would start after them.
    until = now if now is not None else store.transactions.clock()
    if not operator_inbox:
        text = render(incidents(store, until - DAY), until - DAY, until)
        _log(text)
        return {"channel": "log", "since": until - DAY, "until": until, "written": text is not None}
    generation = store.acquire(operator_inbox, holder, now=now)
    if generation is None:
        return {"channel": operator_inbox, "skipped": "the operator inbox's lease is held"}
    try:
        since = store.runs.memory(operator_inbox).get(WATERMARK, until - DAY)
        text = render(incidents(store, since), since, until)
        outcome = Outcome(messages=[Message(text)] if text else [], memory={WATERMARK: until})
        written = store.runs.finish(operator_inbox, holder, generation, [], outcome, now=now)
    finally:
        if not store.release(operator_inbox, holder, generation, now=now):
            # Events are waiting for the operator inbox's agent: hand the lease over.
            if store.release(operator_inbox, holder, generation, now=now, force=True) and ring_inbox:
                ring_inbox(operator_inbox)
    if not written:
        return {"channel": operator_inbox, "skipped": "the lease was lost before the finish"}
    if text is None:
        log.info("daily summary: nothing went wrong since %s", _when(since))
    return {"channel": operator_inbox, "since": since, "until": until, "written": text is not None}


def _log(text: str | None) -> None:
    if text is None:
        log.info("daily summary: nothing went wrong in the last 24 hours")
    else:
        log.warning("%s", text)


@app.task(name="wakeful.daily_summary", bind=True, max_retries=30)
def daily_summary(self: Any) -> dict[str, Any]:
    """Once a day: dead events and expired approvals since the last summary."""
    inbox = runtime_settings().operator_inbox or None
    holder = f"{HOLDER}@{holder_name(self.request.id)}"  # an operator sees who wrote it
    result = write_summary(get_store(), inbox, holder, ring_inbox=ring)
    if "skipped" in result:
        raise self.retry(countdown=60)  # an agent run on the operator inbox is short
    if result.get("written") and inbox:
        ring_dispatch(inbox)  # out now, unless the inbox's gap holds it
    return result
