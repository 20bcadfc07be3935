"""A run's transactions: start (lease + first claim), finish, and finish-and-claim-the-next.

Each is one fenced transaction composed of the rule modules: ``leases`` (who holds the
inbox), ``claims`` (which events the run takes), ``retries`` (a failed run's backoff and
cap), ``outcomes`` (what a run produced), ``memory`` and ``runlog``. The chain of a finish:

- ``finish`` / ``finish_and_claim`` call ``_fence_and_mark``: check the lease
  (``leases.holds``), or count the refusal and write nothing;
- ``mark_events``: mark the run's events done (or failed), then ``_apply_outcome``: apply
  its Outcome and return the run log's row, which the caller writes (alone, or riding in
  the lease's statement).

On PostgreSQL a successful run's lease check and done-marking are one statement
(``_HOLD_AND_DONE``), so a wake is four statements: the start's lock and claim, the finish's
check-and-done and its log-and-resign.
"""

from __future__ import annotations

from collections.abc import Iterable

from typing import Any

from sqlalchemy import BigInteger, Connection, Select, Update, and_, any_, bindparam, exists, select, true, update
from sqlalchemy.dialects.postgresql import ARRAY

from . import claims, counters, leases, memory, outcomes, plans, retries, rules, runlog, validate
from .dialects import Dialect, for_, per_dialect
from .records import Event, InvalidCall, Outcome, RunStart, RunStep
from wakeful.settings import StoreSettings
from .tables import events, status_is


def acquire(conn: Connection, s: StoreSettings, inbox: str, holder: str, now: int | None) -> leases.Acquired:
    return leases.acquire(conn, s, inbox, holder, now)


def claim(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int, now: int | None) -> list[Event]:
    now = leases.holds(conn, inbox, holder, generation, now)
    if now is None:
        return []
    return claims.claim_batch(conn, s, inbox, generation, now)


def start(conn: Connection, s: StoreSettings, inbox: str, holder: str, now: int | None) -> RunStart:
    """acquire + claim (+ the memory the run will see) in one transaction. With nothing to
    claim the lease is given up in the same transaction (a doorbell for work already done
    costs one transaction, not two): an event stored after this claim rings a doorbell that
    finds the lease free."""
    return start_decided(conn, s, inbox, holder, leases.decide(conn, inbox, holder, now))


def start_decided(conn: Connection, s: StoreSettings, inbox: str, holder: str, got: leases.Acquired) -> RunStart:
    """``start`` once the inbox row is locked and the lease decided."""
    if got.generation is None:
        return RunStart(None, [])
    batch = claims.take_and_claim(conn, s, inbox, holder, got.generation, got.now, got.took_over)
    if not batch:
        leases.resign(conn, inbox)
        return RunStart(None, [])
    return RunStart(got.generation, batch, memory.read(conn, inbox) if got.has_memory else {})


def finish(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int,
           event_ids: Iterable[int], outcome: Outcome | None, error: str | None, now: int | None,
           retry_after: int | None = None) -> bool:
    now, finished, log = _fence_and_mark(conn, s, inbox, holder, generation, event_ids, outcome, error, now,
                                          retry_after)
    if log is not None:
        conn.execute(runlog.LOG_RUN, log)
    return finished


def finish_and_claim(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int,
                     event_ids: Iterable[int], outcome: Outcome | None, error: str | None,
                     now: int | None, resign: Any = runlog.LOG_AND_RESIGN_OR_EXTEND,
                     retry_after: int | None = None) -> tuple[RunStep, Any]:
    """finish + the next claim (with the memory as this finish left it), or the release when
    nothing is left, in one transaction. Returns the step and, when it released, the row of
    the statement that did (``resign``: ``runlog.LOG_AND_RESIGN_OR_EXTEND``, or a variant
    that does more in the same round trip, ``backlog.LOG_RESIGN_AND_TAKE``), else None."""
    now, finished, log = _fence_and_mark(conn, s, inbox, holder, generation, event_ids, outcome, error, now,
                                          retry_after)
    if now is None:
        return RunStep(finished=False, events=[], released=False), None
    if not finished:
        # The lease is still this generation's, so its events were finished by an earlier
        # call of this generation whose reply was lost: answer as that call did, with the
        # batch it claimed (no new attempt), not by resigning over it.
        lost = claims.held(conn, inbox, generation)
        if lost:
            leases.extend(conn, s, inbox, now)
            return RunStep(True, lost, released=False, memory=memory.read(conn, inbox)), None
    resigned, row = _log_and_resign_if_idle(conn, s, inbox, now, log, resign)
    if resigned:  # else a full lease for the next batch
        return RunStep(finished, [], released=True), row
    batch = claims.claim_batch(conn, s, inbox, generation, now)
    return RunStep(finished, batch, released=False, memory=memory.read(conn, inbox) if batch else {}), None


def _fence_and_mark(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int,
                     event_ids: Iterable[int], outcome: Outcome | None, error: str | None,
                     now: int | None, retry_after: int | None) -> tuple[int | None, bool, dict[str, Any] | None]:
    """``leases.holds``, then ``mark_events``: (the database's now, or None when the lease
    is not (holder, generation)'s, which is counted and writes nothing; finished; the run
    log's row). On PostgreSQL a successful run's lock, lease check and done-marking are one
    statement (``_HOLD_AND_DONE``): one round trip less on every wake."""
    ids = sorted(set(event_ids))
    if error is None and ids and Dialect.of(conn).writes_in_ctes:
        rows = plans.execute(conn, _HOLD_AND_DONE, {
            "p_ids": ids, "p_inbox": inbox, "p_holder": holder, "p_gen": generation, "p_now": now}).all()
        if not rows or not rules.is_held(rows[0], holder, generation):
            counters.stale_finish_refused(conn, inbox)
            return None, False, None
        now = int(rows[0].now)
        done = [r for r in rows if r.id is not None]
        return (now, *_apply_outcome(conn, s, inbox, holder, generation, ids, done, outcome, None, now))
    now = leases.holds(conn, inbox, holder, generation, now)
    if now is None:
        counters.stale_finish_refused(conn, inbox)
        return None, False, None
    return (now, *mark_events(conn, s, inbox, holder, generation, ids, outcome, error, now, retry_after))


def _log_and_resign_if_idle(conn: Connection, s: StoreSettings, inbox: str, now: int,
                            log: dict[str, Any] | None, statement: Any) -> tuple[bool, Any]:
    """Write the run's log row (if any) and ``leases.resign_if_idle``: on PostgreSQL, one
    statement (``statement``, a data-modifying CTE), one round trip less on every wake.
    (resigned, that statement's row, or None where it was not the one sent)."""
    if log is not None and Dialect.of(conn).writes_in_ctes:
        row = leases.resign_if_idle(conn, s, inbox, now, statement, log)
        return row[0] is None, row
    if log is not None:
        conn.execute(runlog.LOG_RUN, log)
    return leases.resign_if_idle(conn, s, inbox, now)[0] is None, None


def _mine(ids: Any) -> Any:  # type: ignore[no-untyped-def]
    return and_(ids, events.c.inbox == bindparam("p_inbox", type_=events.c.inbox.type),
                status_is("running"), events.c.claim_gen == bindparam("p_gen", type_=BigInteger()))


_MINE = _mine(events.c.id.in_(bindparam("p_ids", expanding=True)))
# The id list as an array on PostgreSQL: one statement text for any number of ids, so it
# can run as a plan-cached function behind a pooler (store/plans.py).
_MINE_PG = _mine(events.c.id == any_(bindparam("p_ids", type_=ARRAY(BigInteger()))))


def _done(mine: Any, finished: Any) -> Update:  # type: ignore[no-untyped-def]
    return (update(events).where(mine).values(status="done", finished=finished, error=None)
            .returning(events.c.id, events.c.claimed_at))


_DONE = per_dialect(lambda d: plans.cached("done", _done(_MINE_PG, bindparam("p_now", type_=BigInteger())))
                   if d.plan_functions else _done(_MINE, bindparam("p_now", type_=BigInteger())))


def _hold_and_done() -> Select:
    """``leases.lock`` and ``_DONE`` as one statement: the inbox row locked and read (with the
    database's clock) in a CTE, and the events marked done only if that row says the lease is
    (p_holder, p_gen)'s and live, as ``leases.holds`` would. One row per event marked, or one
    row with a NULL id when none was: the lease's columns are in every row.

    The events are read in the statement's snapshot, taken before the lock is granted. That
    is as safe as a separate lock first: while the lease is this generation's, only this
    holder writes its claimed rows, and a row changed meanwhile is re-checked on its newest
    version anyway (READ COMMITTED's update recheck)."""
    lease = leases.LOCK.statement.cte("lease")
    done = _done(and_(_MINE_PG, exists().where(rules.held_by(lease.c, bindparam("p_holder"), bindparam("p_gen")))),
                 select(lease.c.now).scalar_subquery()).cte("done")
    return (select(lease.c.holder, lease.c.generation, lease.c.lease_until, lease.c.now, done.c.id, done.c.claimed_at)
            .select_from(lease.outerjoin(done, true())))


_HOLD_AND_DONE = plans.cached("hold_and_done", _hold_and_done())


def mark_events(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int,
                  event_ids: Iterable[int], outcome: Outcome | None, error: str | None, now: int,
                  retry_after: int | None = None) -> tuple[bool, dict[str, Any] | None]:
    """For a caller that holds the inbox row and the lease: the run's events done and its
    Outcome applied, or (with ``error``) the events failed, or (with ``error`` and
    ``retry_after``, the agent's "try later") left to wait out an outage (``retries``). Returns (finished,
    the run log's row, or None when nothing finished: a retried finish after an ambiguous
    commit, or events some other claim has taken since)."""
    ids = sorted(set(event_ids))
    if error is not None:
        error = validate.excerpt(error, 4000) or "error"
    rows = []
    if ids:
        mine = {"p_ids": ids, "p_inbox": inbox, "p_gen": generation, "p_now": now}
        if error is None:
            rows = plans.execute(conn, for_(_DONE, conn), mine).all()
        else:
            values = (retries.failed_values(s, error, now) if retry_after is None
                      else retries.waited_values(s, error, retry_after, now))
            failed = update(events).where(_MINE).values(**values)
            rows = conn.execute(failed.returning(events.c.id, events.c.claimed_at), mine).all()
    return _apply_outcome(conn, s, inbox, holder, generation, ids, rows, outcome, error, now, retry_after is not None)


def _apply_outcome(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int,
              ids: list[int], rows: list[Any], outcome: Outcome | None, error: str | None, now: int,
              waiting: bool = False) -> tuple[bool, dict[str, Any] | None]:
    """Once the ``rows`` (id, claimed_at) of ``ids`` are marked: the Outcome applied (a
    successful run's), and (finished, the run log's row), or (False, None) when none of
    ``ids`` was this run's to mark."""
    if ids and not rows:
        return False, None
    if error is None:
        outcomes.apply(conn, s, inbox, outcome or Outcome(), generation, now, ids)
    started = min((r.claimed_at for r in rows if r.claimed_at is not None), default=now)
    return True, runlog.entry(inbox, generation, holder, started, now, sorted(r.id for r in rows), error, waiting)


def failure(error: str | None, retry_after: int | None) -> str | None:
    """A finish's error, checked against its ``retry_after`` (a "try later" is a failure too)."""
    if retry_after is None:
        return error
    if not isinstance(retry_after, int) or isinstance(retry_after, bool) or retry_after < 0:
        raise InvalidCall(f"retry_after must be a whole number of seconds >= 0, got {retry_after!r}")
    return error or "try later"
