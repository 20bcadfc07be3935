"""What a run produced, applied inside its fenced finish: all of it or none of it."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from . import approvals, effects, memory, outbox, timers, validate
from .records import InvalidOutcome, Outcome
from wakeful.settings import StoreSettings


def apply(conn: Connection, s: StoreSettings, inbox: str, outcome: Outcome, generation: int, now: int,
          event_ids: Sequence[int] = ()) -> None:
    """Messages into the outbox, approval requests, timers, memory writes, and the tool calls
    with effects (committed under ``generation``; store/effects.py). Raises ``InvalidOutcome``
    (and writes nothing, since the caller's transaction rolls back) for anything the store
    refuses."""
    if not isinstance(outcome, Outcome):
        raise InvalidOutcome(f"a run must return an Outcome, got {type(outcome).__name__}")
    try:
        _apply(conn, s, inbox, outcome, now, event_ids)
        effects.apply(conn, s, inbox, outcome.effects, outcome.answered, generation, now)
    except InvalidOutcome:
        raise
    except (TypeError, ValueError) as exc:
        raise InvalidOutcome(str(exc)) from None


def _apply(conn: Connection, s: StoreSettings, inbox: str, outcome: Outcome, now: int,
           event_ids: Sequence[int]) -> None:
    if outcome.messages:
        outbox.write_messages(conn, inbox, outcome.messages, now, event_ids)
    for a in outcome.approvals:
        approvals.request(conn, s, inbox, a.request_id, a.action, a.expires_in, now)
    for t in outcome.timers:
        due = t.due if t.due is not None else (now + t.after if t.after is not None else None)
        # an agent's timer key is outside input too: never a runtime source (approval, tool ...)
        key = validate.outside_key(*t.key) if t.key is not None else None
        timers.add(conn, s, inbox, t.timer_id, due, t.payload, every=t.every, cron=t.cron,
                   tz=t.tz, key=key, misfire=t.misfire, now=now)
    for timer_id in outcome.cancel_timers:
        timers.cancel(conn, inbox, validate.name("timer_id", timer_id, timers.TIMER_ID_MAX))
    memory.write(conn, s, inbox, outcome.memory, now)
