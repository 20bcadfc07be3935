"""Timers: turned into inbox events by a scan that advances each timer in the same transaction.

Two defences against a double fire: the scan moves the timer past the occurrence it fired in
the transaction that stored the event (a second scanner finds nothing due, or skips the
locked row), and the event key ``timer_id@scheduled_time`` refuses a replay the transaction
cannot see (a deploy that re-registers a schedule with its old due time).

Cron expressions are parsed by croniter in the timer's IANA zone, so "09:00 Europe/Berlin"
fires once per local day across both DST changes; everything stored is UTC epoch seconds.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from sqlalchemy import Connection, Row, bindparam, delete, select, update

from . import inbox as inbox_rules
from . import validate
from .db import upsert
from .records import Fired, InvalidEvent, InvalidTimer, TimerRow
from wakeful.settings import StoreSettings
from .tables import timers
from .transactions import Transactions

TIMER_ID_MAX = 200  # leaves room for "@<epoch seconds>" in the event's source_id
MISFIRE_POLICIES = ("coalesce", "each")
LIVE = ~timers.c.done  # renders as the partial index's predicate on both engines


def add(
    conn: Connection,
    s: StoreSettings,
    inbox: str,
    timer_id: str,
    due: int | None,
    payload: dict[str, Any],
    *,
    every: int | None = None,
    cron: str | None = None,
    tz: str | None = None,
    key: tuple[str, str] | None = None,
    misfire: str = "coalesce",
    now: int,
) -> None:
    """Create or replace the timer ``timer_id`` of ``inbox``.

    ``due`` is the first time it may fire; for a cron timer the first occurrence at or after
    it. ``due=None`` means the next occurrence after ``now`` (recurring timers only).
    """
    try:
        due, key = _checked(s, timer_id, due, payload, every, cron, tz, key, misfire, now)
    except InvalidEvent as exc:  # from the validators shared with events
        raise InvalidTimer(str(exc)) from None
    upsert(
        conn,
        timers,
        [{
            "inbox": inbox,
            "timer_id": timer_id,
            "due": int(due),
            "every": every,
            "cron": cron,
            "tz": tz,
            "misfire": misfire,
            "payload": payload,
            "key_source": key[0] if key else None,
            "key_source_id": key[1] if key else None,
            "done": False,
        }],
        ["inbox", "timer_id"],
    )


def _checked(s: StoreSettings, timer_id: str, due: int | None, payload: dict[str, Any],
             every: int | None, cron: str | None, tz: str | None, key: tuple[str, str] | None,
             misfire: str, now: int) -> tuple[int, tuple[str, str] | None]:
    """The timer's first due time and its fixed key, or ``InvalidTimer`` saying what is wrong."""
    validate.name("timer_id", timer_id, TIMER_ID_MAX)
    validate.payload(payload, s.max_payload_bytes)
    zone = _zone(tz)
    if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every <= 0):
        raise InvalidTimer(f"every must be a positive number of seconds, got {every!r}")
    if cron is not None and not croniter.is_valid(cron):
        raise InvalidTimer(f"cron expression {cron!r} is not valid")
    if every is not None and cron is not None:
        raise InvalidTimer("a timer repeats by every= or by cron=, not both")
    if key is not None:
        if every is not None or cron is not None:
            raise InvalidTimer("a recurring timer can't use a fixed event key")
        key = validate.key(*key)
    if misfire not in MISFIRE_POLICIES:
        raise InvalidTimer(f"misfire must be one of {MISFIRE_POLICIES}, got {misfire!r}")
    if due is None:
        if every is None and cron is None:
            raise InvalidTimer("a one-off timer needs a due time")
        due = now + every if every is not None else next_cron(cron, zone, now)  # type: ignore[arg-type]
    elif cron is not None:
        due = next_cron(cron, zone, int(due) - 1)
    return int(due), key


def cancel(conn: Connection, inbox: str, timer_id: str) -> bool:
    result = conn.execute(delete(timers).where(timers.c.inbox == inbox, timers.c.timer_id == timer_id))
    return result.rowcount > 0


def settle(conn: Connection, inbox: str, timer_id: str) -> None:
    """A live one-off timer whose event another path stored under its key: done, unfired."""
    conn.execute(update(timers).where(timers.c.inbox == inbox, timers.c.timer_id == timer_id, LIVE)
                 .values(done=True))


def due_now(conn: Connection, now: int, limit: int) -> list[Row]:
    """Lock up to ``limit`` due timers; rows another scanner holds are skipped, not waited on."""
    return conn.execute(
        select(timers)
        .where(LIVE, timers.c.due <= now)
        .order_by(timers.c.due)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()


def fire(conn: Connection, s: StoreSettings, rows: list[Row], now: int) -> list[Fired]:
    """Store the events of these due timers and advance each, in the caller's transaction.

    Set-wise: one multi-row INSERT for every event of the batch and one executemany UPDATE
    for the next due times, whatever the batch size (the cron and misfire maths stay here)."""
    keys: list[tuple[str, str, str, str]] = []  # (inbox, timer_id, source, source_id)
    items: list[tuple[str, str, str, dict[str, Any]]] = []
    advanced: list[dict[str, Any]] = []
    for row in rows:
        occurrences, next_due = _missed(row, now, s.misfire_each_cap)
        for at, skipped, capped in occurrences:
            body = dict(row.payload, scheduled_for=at, late_by=now - at, skipped=skipped)
            if capped:
                body["capped_at"] = s.misfire_each_cap
            source = row.key_source or "timer"
            source_id = row.key_source_id or f"{row.timer_id}@{at}"
            keys.append((row.inbox, row.timer_id, source, source_id))
            items.append((row.inbox, source, source_id, body))
        advanced.append({"b_inbox": row.inbox, "b_timer_id": row.timer_id,
                         "b_due": row.due if next_due is None else next_due, "b_done": next_due is None})
    stored = inbox_rules.insert_events(conn, items, now)
    if advanced:
        conn.execute(
            update(timers)
            .where(timers.c.inbox == bindparam("b_inbox"), timers.c.timer_id == bindparam("b_timer_id"))
            .values(due=bindparam("b_due"), done=bindparam("b_done")),
            advanced,
        )
    return [Fired(*key, stored=ok) for key, ok in zip(keys, stored)]


def _missed(row: Row, now: int, cap: int) -> tuple[list[tuple[int, int, bool]], int | None]:
    """The occurrences to emit as (scheduled_for, skipped, capped), and the next due time.

    coalesce: one event for the latest missed occurrence, ``skipped`` = the ones folded in.
    each: one event per missed occurrence, the latest ``cap`` of them; the first emitted
    carries in ``skipped`` how many older ones the cap dropped.
    """
    keep = cap if row.misfire == "each" else 1
    if row.every is None and row.cron is None:
        return [(row.due, 0, False)], None
    if row.every is not None:
        missed = (now - row.due) // row.every + 1
        first_kept = max(0, missed - keep)
        ats = [row.due + k * row.every for k in range(first_kept, missed)]
        next_due = row.due + missed * row.every
    else:
        zone = _zone(row.tz)
        window: deque[int] = deque(maxlen=keep)
        at, missed = row.due, 0
        while at <= now:
            window.append(at)
            missed += 1
            at = next_cron(row.cron, zone, at)
        ats, next_due = list(window), at
    dropped = missed - len(ats)
    capped = row.misfire == "each" and dropped > 0
    return [(at, dropped if i == 0 else 0, capped) for i, at in enumerate(ats)], next_due


def next_cron(expr: str, zone: ZoneInfo, after: int) -> int:
    """The first occurrence of ``expr`` strictly after ``after``, in epoch seconds."""
    return int(croniter(expr, datetime.fromtimestamp(after, zone)).get_next(float))


def _zone(tz: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(tz or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidTimer(f"unknown time zone {tz!r} (use an IANA name such as Europe/Berlin)") from None


def view(conn: Connection, inbox: str) -> list[TimerRow]:
    rows = conn.execute(select(timers).where(timers.c.inbox == inbox).order_by(timers.c.due, timers.c.timer_id))
    return [
        TimerRow(
            id=r.timer_id, inbox=r.inbox, due=r.due, every=r.every, cron=r.cron, tz=r.tz,
            misfire=r.misfire, payload=r.payload,
            key=(r.key_source, r.key_source_id) if r.key_source else None, done=r.done,
        )
        for r in rows
    ]


# -- wakes the model sets (wakeful/agent/wakes.py) -------------------------------------------------
# A wake is a timer whose id starts with WAKE_PREFIX. A run writes its wakes through its
# Outcome (the fenced finish); a wake a human approved first (policy "ask") is written here
# by the effect executor, fenced by the effect's attempt as the effect's own record is.

WAKE_PREFIX = "wake:"


def live_wakes(conn: Connection, inbox: str) -> int:
    """How many wakes of ``inbox`` may still fire (a recurring one always may)."""
    return len(conn.execute(
        select(timers.c.timer_id).where(timers.c.inbox == inbox, LIVE,
                                        timers.c.timer_id.startswith(WAKE_PREFIX, autoescape=True))
    ).all())


def _attempt_holds(conn: Connection, inbox: str, tool_use_id: str, attempt: int) -> bool:
    """The effect ``tool_use_id`` is still executing this attempt (its row locked until the
    commit): a superseded attempt writes nothing."""
    from .tables import effects  # here, not at the top: effects is the executor's table

    row = conn.execute(
        select(effects.c.status, effects.c.attempts)
        .where(effects.c.inbox == inbox, effects.c.tool_use_id == tool_use_id)
        .with_for_update()
    ).first()
    return row is not None and row.status == "executing" and row.attempts == attempt


class Wakes:
    """The executor's side of the wakes the model sets (``store.wakes``): each call one
    transaction, fenced by the effect attempt."""

    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    def write(self, inbox: str, tool_use_id: str, attempt: int, timer: Any, max_pending: int, *,
              now: int | None = None) -> str:
        """Write ``timer`` (a :class:`store.Timer`; ``after`` counts from now) for the effect
        ``tool_use_id``: "written"; "exists" (a retried attempt: the first write stands, so an
        occurrence never fires twice); "limit" (``max_pending`` live wakes already; nothing
        written); "superseded" (this attempt no longer holds the effect)."""
        from .db import clock

        with self.transactions.transaction() as conn:
            if not _attempt_holds(conn, inbox, tool_use_id, attempt):
                return "superseded"
            exists = conn.execute(select(timers.c.timer_id).where(
                timers.c.inbox == inbox, timers.c.timer_id == timer.timer_id)).first()
            if exists is not None:
                return "exists"
            if live_wakes(conn, inbox) >= max_pending:
                return "limit"
            at = clock(conn, now)
            due = timer.due if timer.due is not None else (at + timer.after if timer.after is not None else None)
            add(conn, self.transactions.settings, inbox, timer.timer_id, due, timer.payload, every=timer.every,
                cron=timer.cron, tz=timer.tz, misfire=timer.misfire, now=at)
            return "written"

    def cancel(self, inbox: str, tool_use_id: str, attempt: int, timer_id: str) -> str:
        """Delete the wake ``timer_id`` for the effect ``tool_use_id``: "cancelled", "unknown"
        (no such wake: never set, fired, or cancelled already), or "superseded"."""
        with self.transactions.transaction() as conn:
            if not _attempt_holds(conn, inbox, tool_use_id, attempt):
                return "superseded"
            if not timer_id.startswith(WAKE_PREFIX):
                return "unknown"
            return "cancelled" if cancel(conn, inbox, timer_id) else "unknown"
