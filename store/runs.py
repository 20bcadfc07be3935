"""A run: claim a batch under the lease, then finish it in one fenced transaction.

The rules of the claim come from the article: attempts are counted when an event is claimed
(a worker that crashes never records a failure), rows left running by an older generation go
back to pending (their worker lost the lease), events at the attempt cap are parked dead,
and a retried event is claimed alone so a poison event cannot drag healthy ones down.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Update, and_, bindparam, case, delete, exists, literal, or_, select, union_all, update

from . import approvals, counters, leases, timers, validate
from .inbox import EVENT_COLUMNS, to_event
from .db import upsert
from .records import Event, InvalidEvent, Message, Outcome, RunStart, RunStep
from .settings import StoreSettings
from .tables import events, inboxes, memory, outbox, runs, status_is


def acquire(conn: Connection, s: StoreSettings, inbox: str, holder: str, now: int | None) -> leases.Acquired:
    """Take the lease; after a takeover, first put right what the lapsed holder left."""
    got = leases.acquire(conn, s, inbox, holder, now)
    if got.took_over:
        _tidy(conn, s, inbox, got.generation, got.now)
    return got


def claim(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int, now: int | None) -> list[Event]:
    now = leases.holds(conn, inbox, holder, generation, now)
    if now is None:
        return []
    return claim_batch(conn, s, inbox, generation, now)


def start(conn: Connection, s: StoreSettings, inbox: str, holder: str, now: int | None) -> RunStart:
    """acquire + claim (+ the memory the run will see) in one transaction."""
    got = leases.decide(conn, inbox, holder, now)
    if got.generation is None:
        return RunStart(None, [])
    if got.took_over:
        _tidy(conn, s, inbox, got.generation, got.now)
    batch = take_and_claim(conn, s, inbox, holder, got.generation, got.now)
    return RunStart(got.generation, batch, read_memory(conn, inbox) if batch and got.has_memory else {})


def take_and_claim(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int,
                   now: int) -> list[Event]:
    """Write the lease ``decide`` granted, then ``claim_batch``. On PostgreSQL the lease
    write rides in the claim's statement, as a data-modifying CTE: one round trip less on
    every wake. The inbox row is already locked, so the claim's snapshot, taken when that
    statement starts, sees every event committed before the lock was granted."""
    if conn.dialect.name != "postgresql":  # SQLite has no data-modifying CTEs
        leases.take(conn, s, inbox, now, holder, generation)
        return claim_batch(conn, s, inbox, generation, now)
    return _claim(conn, TAKE_AND_CLAIM, s, inbox, generation, now,
                  {"p_holder": holder, "p_until": now + s.lease_ttl})


def finish_and_claim(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int,
                     event_ids: Iterable[int], outcome: Outcome | None, error: str | None,
                     now: int | None) -> RunStep:
    """finish + the next claim (with the memory as this finish left it), or the release when
    nothing is left, in one transaction."""
    now = leases.holds(conn, inbox, holder, generation, now)
    if now is None:
        counters.bump(conn, counters.STALE_FINISHES_REFUSED)
        return RunStep(finished=False, events=[], released=False)
    finished, log = complete(conn, s, inbox, holder, generation, event_ids, outcome, error, now)
    if _log_and_resign_if_idle(conn, s, inbox, now, log):  # else a full lease for the next batch
        return RunStep(finished, [], released=True)
    batch = claim_batch(conn, s, inbox, generation, now)
    return RunStep(finished, batch, released=False, memory=read_memory(conn, inbox) if batch else {})


def claim_batch(conn: Connection, s: StoreSettings, inbox: str, generation: int, now: int) -> list[Event]:
    """The claim rules, for a caller that already holds the inbox row and the lease: the
    oldest ready events up to ``batch_limit``, or, if any ready event has been tried
    before, that one alone. One statement.

    No housekeeping here: rows left running by an older generation, and the attempt cap
    they may have reached, are put right once, by the takeover (``acquire``). Since then
    only this generation has claimed the inbox's events, and a failed run parks its at-cap
    rows dead itself (``record``)."""
    return _claim(conn, CLAIM, s, inbox, generation, now, {})


def _claim(conn: Connection, statement: Update, s: StoreSettings, inbox: str, generation: int,
           now: int, params: dict[str, Any]) -> list[Event]:
    rows = conn.execute(statement, {**params, "p_inbox": inbox, "p_gen": generation, "p_now": now,
                                    "p_limit": s.batch_limit}).all()
    return sorted((to_event(r) for r in rows), key=lambda e: e.id)  # RETURNING order is arbitrary


def _claim_statement() -> Update:
    ready = leases.claimable(bindparam("p_inbox"), None, bindparam("p_now"))
    tried = and_(ready, events.c.attempts > 0)
    retry = select(events.c.id).where(tried).order_by(events.c.id).limit(1).subquery()
    fresh = (select(events.c.id).where(ready, events.c.attempts == 0)
             .order_by(events.c.id).limit(bindparam("p_limit")).subquery())
    batch = union_all(
        select(retry.c.id),
        select(fresh.c.id).where(~exists().where(tried)),
    )
    return (
        update(events)
        .where(events.c.id.in_(batch))
        .values(status="running", attempts=events.c.attempts + 1, claim_gen=bindparam("p_gen"),
                claimed_at=bindparam("p_now"))
        .returning(*EVENT_COLUMNS)
    )


CLAIM = _claim_statement()  # built once: see store.db.NOW
TAKE_AND_CLAIM = CLAIM.add_cte(leases.TAKE.returning(inboxes.c.inbox).cte("take_lease"))


def _tidy(conn: Connection, s: StoreSettings, inbox: str, generation: int, now: int) -> None:
    # One statement for both housekeeping rules: rows an older generation left running go
    # back to pending (their worker lost the lease), or dead if they reached the cap; and
    # pending rows at the cap go dead (after ``max_attempts`` was lowered).
    at_cap = events.c.attempts >= s.max_attempts
    conn.execute(
        update(events)
        .where(
            events.c.inbox == inbox,
            or_(and_(status_is("running"), events.c.claim_gen < generation),
                and_(status_is("pending"), at_cap)),
        )
        .values(
            status=case((at_cap, "dead"), else_="pending"),
            finished=case((at_cap, now), else_=None),
            error=case(
                (~at_cap, events.c.error),
                (events.c.error.is_(None), f"too many attempts: claimed {s.max_attempts} times without a finish"),
                else_=f"too many attempts ({s.max_attempts}); last error: " + events.c.error,
            ),
        )
    )


def finish(
    conn: Connection,
    s: StoreSettings,
    inbox: str,
    holder: str,
    generation: int,
    event_ids: Iterable[int],
    outcome: Outcome | None,
    error: str | None,
    now: int | None,
) -> bool:
    now = leases.holds(conn, inbox, holder, generation, now)
    if now is None:
        counters.bump(conn, counters.STALE_FINISHES_REFUSED)
        return False
    return record(conn, s, inbox, holder, generation, event_ids, outcome, error, now)


_MINE = and_(events.c.id.in_(bindparam("p_ids", expanding=True)), events.c.inbox == bindparam("p_inbox"),
             status_is("running"), events.c.claim_gen == bindparam("p_gen"))
_DONE = (update(events).where(_MINE).values(status="done", finished=bindparam("p_now"), error=None)
         .returning(events.c.id, events.c.claimed_at))
_LOG_RUN = runs.insert().values(
    inbox=bindparam("p_inbox"), generation=bindparam("p_gen"), holder=bindparam("p_holder"),
    started=bindparam("p_started"), finished=bindparam("p_now"), outcome=bindparam("p_outcome"),
    event_ids=bindparam("p_event_ids"), error=bindparam("p_error"))
# On PostgreSQL the run's log row rides in the statement that resigns or extends the lease.
_LOG_AND_RESIGN_OR_EXTEND = leases.RESIGN_OR_EXTEND.add_cte(_LOG_RUN.returning(runs.c.id).cte("run_log"))


def record(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int,
           event_ids: Iterable[int], outcome: Outcome | None, error: str | None, now: int) -> bool:
    """A run's completion, for a caller that already holds the inbox row and the lease."""
    finished, log = complete(conn, s, inbox, holder, generation, event_ids, outcome, error, now)
    if log is not None:
        conn.execute(_LOG_RUN, log)
    return finished


def _log_and_resign_if_idle(conn: Connection, s: StoreSettings, inbox: str, now: int,
                            log: dict[str, Any] | None) -> bool:
    """Write the run's log row (if any) and ``leases.resign_if_idle``: on PostgreSQL, one
    statement (a data-modifying CTE), one round trip less on every wake."""
    if log is not None and conn.dialect.name == "postgresql":
        return leases.resign_if_idle(conn, s, inbox, now, _LOG_AND_RESIGN_OR_EXTEND, log)
    if log is not None:
        conn.execute(_LOG_RUN, log)
    return leases.resign_if_idle(conn, s, inbox, now)


def complete(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int,
             event_ids: Iterable[int], outcome: Outcome | None, error: str | None, now: int
             ) -> tuple[bool, dict[str, Any] | None]:
    """``record`` without its last statement: finish the events and apply the outcome, and
    return (finished, the parameters of the run's log row, or None when nothing finished)."""
    ids = sorted(set(event_ids))
    if error is not None:
        error = validate.excerpt(error, 4000) or "error"
    rows = []
    if ids:
        mine = {"p_ids": ids, "p_inbox": inbox, "p_gen": generation, "p_now": now}
        if error is None:
            rows = conn.execute(_DONE, mine).all()
        else:
            failed = update(events).where(_MINE).values(**_failed(s, error, now))
            rows = conn.execute(failed.returning(events.c.id, events.c.claimed_at), mine).all()
        if not rows:
            return False, None  # already finished (a retried finish after an ambiguous commit) or reclaimed
    if error is None:
        apply_outcome(conn, s, inbox, outcome or Outcome(), now)
    started = min((r.claimed_at for r in rows if r.claimed_at is not None), default=now)
    return True, {"p_inbox": inbox, "p_gen": generation, "p_holder": holder, "p_started": started,
                  "p_now": now, "p_outcome": "done" if error is None else "error",
                  "p_event_ids": sorted(r.id for r in rows), "p_error": error}


def backoff(s: StoreSettings, attempts: int) -> int:
    """Seconds before a failed event may be claimed again: exponential, capped."""
    return min(s.backoff_max, s.backoff_base * 2 ** max(0, attempts - 1))


def _failed(s: StoreSettings, error: str, now: int) -> dict[str, Any]:
    """Column values for a failed run's events: dead at the cap, else pending after a backoff
    that depends on each row's attempts (a CASE, so one UPDATE serves the whole batch)."""
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


def apply_outcome(conn: Connection, s: StoreSettings, inbox: str, outcome: Outcome, now: int) -> None:
    """Everything a run produced, inside the fenced transaction: all of it or none of it."""
    if not isinstance(outcome, Outcome):
        raise InvalidEvent(f"a run must return an Outcome, got {type(outcome).__name__}")
    messages = [m if isinstance(m, Message) else Message(m) for m in outcome.messages]
    if messages:
        conn.execute(
            outbox.insert(),
            [
                {"inbox": inbox, "body": validate.text_value("message body", m.body),
                 "urgent": bool(m.urgent), "created": now}
                for m in messages
            ],
        )
    for a in outcome.approvals:
        approvals.request(conn, s, inbox, a.request_id, a.action, a.expires_in, now)
    for t in outcome.timers:
        due = t.due if t.due is not None else (now + t.after if t.after is not None else None)
        timers.add(conn, s, inbox, t.timer_id, due, t.payload, every=t.every, cron=t.cron,
                   tz=t.tz, key=t.key, misfire=t.misfire, now=now)
    write_memory(conn, s, inbox, outcome.memory, now)


def write_memory(conn: Connection, s: StoreSettings, inbox: str, writes: dict[str, Any], now: int) -> None:
    for key, value in writes.items():
        validate.name("memory key", key, 255)
        if value is None:
            conn.execute(delete(memory).where(and_(memory.c.inbox == inbox, memory.c.key == key)))
        else:
            validate.payload({"value": value}, s.max_payload_bytes)
            upsert(conn, memory, {"inbox": inbox, "key": key, "value": value, "updated": now}, ["inbox", "key"])


_MEMORY = select(memory.c.key, memory.c.value).where(memory.c.inbox == bindparam("p_inbox")).order_by(memory.c.key)


def read_memory(conn: Connection, inbox: str) -> dict[str, Any]:
    return {r.key: r.value for r in conn.execute(_MEMORY, {"p_inbox": inbox})}
