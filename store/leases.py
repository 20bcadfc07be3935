"""One worker per inbox: a lease with a generation (fencing token).

River's shape plus a generation: take (or renew), renew only if still mine, resign (or, for
the holder after a finish, resign-or-extend in one statement), and the check every fenced
write makes. The inbox row is locked (``SELECT ... FOR UPDATE``, or the upsert that creates
it on a first wake) by the statement that also reads the database's clock, so concurrent
decisions about one inbox serialize on that row and expiry is judged on the database's
clock alone.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import (ARRAY, BigInteger, Connection, Insert, Row, String, Update, and_, bindparam, case, exists,
                        func, select, tuple_, update)

from . import plans, rules
from .db import NOW, insert
from .dialects import Dialect, for_, per_dialect
from wakeful.settings import StoreSettings
from .tables import events, inboxes, memory


LOCK = plans.cached(
    "lock",
    select(inboxes.c.holder, inboxes.c.generation, inboxes.c.lease_until, inboxes.c.last_sent,
           NOW.label("now"))
    .where(inboxes.c.inbox == bindparam("p_inbox"))
    .with_for_update()
)


def lock(conn: Connection, inbox: str, now: int | None = None) -> Row | None:
    """Lock this inbox's row for the rest of the transaction (a no-op lock on SQLite, where
    BEGIN IMMEDIATE already serializes writers). The row carries ``now``: the caller's, or
    the database's clock read by this same statement. If a concurrent transaction changed the
    row while this one waited for the lock, PostgreSQL re-reads the row, and the clock, before
    returning it; a clock read before an uneventful wait errs on the side of the lease's
    existing state, never towards a takeover."""
    return plans.execute(conn, LOCK, {"p_inbox": inbox, "p_now": now}).one_or_none()


def _lock_or_create(dialect: Dialect) -> Insert:
    # ON CONFLICT DO UPDATE locks an existing row as FOR UPDATE would (and waits for it the
    # same way); the no-op SET is what makes it return the row.
    stmt = dialect.insert(inboxes).values(inbox=bindparam("p_inbox"))
    return (
        stmt.on_conflict_do_update(index_elements=["inbox"], set_={"inbox": stmt.excluded.inbox})
        .returning(inboxes.c.holder, inboxes.c.generation, inboxes.c.lease_until, inboxes.c.last_sent,
                   NOW.label("now"),
                   # Whether a run must read the inbox's memory at all: most agents keep
                   # none here, and then the read is a round trip for nothing.
                   exists().where(memory.c.inbox == bindparam("p_inbox")).label("has_memory"))
    )


LOCK_OR_CREATE = per_dialect(lambda d: plans.cached("lock_or_create", _lock_or_create(d)) if d.plan_functions
                             else _lock_or_create(d))


def lock_or_create(conn: Connection, inbox: str, now: int | None = None) -> Row:
    """``lock``, creating the row first for an inbox never woken before: one statement."""
    return plans.execute(conn, for_(LOCK_OR_CREATE, conn), {"p_inbox": inbox, "p_now": now}).one()


def _create_rows(dialect: Dialect) -> Insert | None:
    if not dialect.array_parameters:
        return None
    # Only the names with no row in the statement's snapshot go to the insert. ON CONFLICT
    # alone checks each name against the unique index, and waits for any transaction that is
    # updating that row (a run taking or giving back its lease) to end: a dense worker's
    # takers, which make rows for the 32 oldest candidates, waited ~20 ms per take on this
    # (docs/performance.md, "3 December, night"). A row being made by another taker right now
    # is still waited for, as it must be.
    name = func.unnest(bindparam("p_names", type_=ARRAY(String))).table_valued("name").render_derived(name="names")
    missing = select(name.c.name).where(~exists().where(inboxes.c.inbox == name.c.name))
    return dialect.insert(inboxes).from_select(["inbox"], missing).on_conflict_do_nothing(index_elements=["inbox"])


CREATE_ROWS = per_dialect(_create_rows)


def create_rows(conn: Connection, names: list[str]) -> None:
    """Rows for inboxes never woken before, so they can be locked (or hold ``last_sent``);
    an existing row is left as it is. One statement (an executemany sent one INSERT per
    name, and a multi-row VALUES compiles once per number of names)."""
    if not names:
        return
    statement = for_(CREATE_ROWS, conn)
    if statement is not None:
        conn.execute(statement, {"p_names": list(names)})
    else:
        conn.execute(insert(conn, inboxes).values([{"inbox": name} for name in names])
                     .on_conflict_do_nothing(index_elements=["inbox"]))


class Acquired(NamedTuple):
    generation: int | None  # None: someone else holds a live lease
    now: int
    took_over: bool  # the lease lapsed in another holder's hands (counted on the inbox row)
    has_memory: bool  # the inbox has memory keys (read under the same lock)


def acquire(conn: Connection, s: StoreSettings, inbox: str, holder: str, now: int | None) -> Acquired:
    """Take or renew the lease."""
    got = decide(conn, inbox, holder, now)
    if got.generation is not None:
        take(conn, s, inbox, got.now, holder, got.generation, got.took_over)
    return got


def decide(conn: Connection, inbox: str, holder: str, now: int | None) -> Acquired:
    """Lock the inbox and decide whether ``holder`` gets the lease, and which generation;
    the caller writes it (``take``) before the transaction ends."""
    return judge(lock_or_create(conn, inbox, now), holder)


def judge(row: Row, holder: str) -> Acquired:
    """``decide`` on an inbox row this transaction has locked, read with the database's
    ``now`` and ``has_memory`` (``lock_or_create``'s columns)."""
    now = int(row.now)
    took_over = False
    if row.holder == holder and rules.lease_live(row.lease_until, now):
        generation = row.generation  # renewal by the live holder keeps its generation
    elif not rules.lease_live(row.lease_until, now):
        generation = row.generation + 1  # takeover of an expired or released lease
        took_over = row.holder is not None  # a release clears the holder; a lapse does not
    else:
        return Acquired(None, now, False, bool(row.has_memory))
    return Acquired(generation, now, took_over, bool(row.has_memory))


_EXTEND = update(inboxes).where(inboxes.c.inbox == bindparam("p_inbox")).values(lease_until=bindparam("p_until"))
TAKE = _EXTEND.values(holder=bindparam("p_holder"), generation=bindparam("p_gen"),
                      takeovers=inboxes.c.takeovers + bindparam("p_took_over"))
_RESIGN = update(inboxes).where(inboxes.c.inbox == bindparam("p_inbox")).values(holder=None, lease_until=0)


def extend(conn: Connection, s: StoreSettings, inbox: str, now: int) -> None:
    """A full lease from ``now`` for its holder."""
    conn.execute(_EXTEND, {"p_inbox": inbox, "p_until": now + s.lease_ttl})


def take(conn: Connection, s: StoreSettings, inbox: str, now: int, holder: str, generation: int,
         took_over: bool) -> None:
    conn.execute(TAKE, {"p_inbox": inbox, "p_until": now + s.lease_ttl, "p_holder": holder,
                        "p_gen": generation, "p_took_over": int(took_over)})


def holds(conn: Connection, inbox: str, holder: str, generation: int, now: int | None) -> int | None:
    """Lock the inbox and return the database's now if (holder, generation) holds a live
    lease, else None. Every fenced write starts here, in its own transaction."""
    row = lock(conn, inbox, now)
    if row is None or not rules.is_held(row, holder, generation):
        return None
    return int(row.now)


def renew(conn: Connection, s: StoreSettings, inbox: str, holder: str, generation: int, now: int | None) -> bool:
    now = holds(conn, inbox, holder, generation, now)
    if now is None:
        return False
    extend(conn, s, inbox, now)
    return True


def renew_many(conn: Connection, s: StoreSettings, held: list[tuple[str, str, int]],
               now: int | None) -> set[tuple[str, str, int]]:
    """``renew`` for many leases in one UPDATE: each row whose (inbox, holder, generation) is
    given and whose lease is live (``is_held``'s test, on the database's clock) gets a full
    lease from now. The rows are locked in the order the UPDATE meets them; no other store
    transaction locks more than one inbox row, so this cannot deadlock with them."""
    key = tuple_(inboxes.c.inbox, inboxes.c.holder, inboxes.c.generation)
    renewed = conn.execute(
        update(inboxes).where(key.in_(sorted(held)), rules.lease_live(inboxes.c.lease_until, NOW))
        .values(lease_until=NOW + s.lease_ttl)
        .returning(inboxes.c.inbox, inboxes.c.holder, inboxes.c.generation), {"p_now": now}).all()
    return {(r.inbox, r.holder, r.generation) for r in renewed}


def release(conn: Connection, inbox: str, holder: str, generation: int, now: int | None,
            force: bool = False) -> bool:
    """Resign, unless claimable work remains: an event ingested after the last claim rang a
    doorbell that found the lease held, so the holder must take it (the lost wake-up).

    ``force`` resigns anyway: for a worker that hands a busy inbox back and rings its
    doorbell itself, so one inbox cannot keep a worker forever."""
    now = holds(conn, inbox, holder, generation, now)
    if now is None or (not force and has_claimable(conn, inbox, generation, now)):
        return False
    resign(conn, inbox)
    return True


def resign(conn: Connection, inbox: str) -> None:
    conn.execute(_RESIGN, {"p_inbox": inbox})


def resign_if_idle(conn: Connection, s: StoreSettings, inbox: str, now: int,
                   statement: plans.Cached | None = None, params: dict[str, Any] | None = None) -> Any:
    """For the holder, under the inbox lock: resign if nothing is claimable now, else extend
    the lease for the claim that follows. One statement either way; its row, whose first
    column is the holder it left (None: it resigned). (Claimable work cannot vanish before
    that claim: only claims under this lock take it.)

    ``statement``: ``RESIGN_OR_EXTEND`` with more around it (data-modifying CTEs, and their
    ``params``), so a caller's last write, or next read, rides in the same round trip."""
    return plans.execute(conn, RESIGN_OR_EXTEND if statement is None else statement,
                         {**(params or {}), "p_inbox": inbox, "p_now": now,
                          "p_until": now + s.lease_ttl}).one()


def has_claimable(conn: Connection, inbox: str, generation: int, now: int) -> bool:
    return bool(conn.execute(select(exists().where(claimable(inbox, generation, now)))).scalar())


def claimable(inbox: Any, generation: Any, now: Any) -> Any:
    """``rules.claimable`` among ``inbox``'s events."""
    return and_(events.c.inbox == inbox, rules.claimable(events, generation, now))


def _resign_or_extend() -> Update:
    idle = ~exists().where(claimable(bindparam("p_inbox"), inboxes.c.generation, bindparam("p_now")))
    return (
        update(inboxes)
        .where(inboxes.c.inbox == bindparam("p_inbox"))
        .values(holder=case((idle, None), else_=inboxes.c.holder),
                lease_until=case((idle, 0), else_=bindparam("p_until", type_=BigInteger())))
        # The holder itself, tested in Python: SQLite 3.40 returns 0 for "RETURNING holder
        # IS NULL" on a row this UPDATE set to NULL (found by the store tests).
        .returning(inboxes.c.holder)
    )


RESIGN_OR_EXTEND = plans.cached("resign_or_extend", _resign_or_extend())
